package reconcile

import (
	"context"
	"html"
	"regexp"
	"strings"

	"exacto.dev/pkg/platform/hubspot"
)

// minRepeat is the shortest reply text whose repetition counts as a copy: "Thanks"
// twice on one contact is no duplicate.
const minRepeat = 20

// duplicateActivity: two HubSpot notes for one reply. For every contact whose HubSpot
// contact Exacto recorded, the notes associated with it are read (one search); a note
// that names one of our notes' event id in its body, or that carries no event id and
// repeats one of our notes' reply text, is a duplicate (made by hand, by another
// integration, or copied). Reported for review; nothing is ever deleted.
func duplicateActivity(ctx context.Context, p *Pass) ([]Finding, error) {
	if p.Clients.HubSpot == nil {
		return nil, nil
	}
	cs, err := p.projectionContacts(ctx)
	if err != nil {
		return nil, err
	}
	var out []Finding
	for _, t := range hubspotTargets(cs) {
		notes, err := p.Clients.HubSpot.NotesOfContact(ctx, t.id)
		if err != nil {
			return out, err
		}
		out = append(out, duplicateNotes(p, emailOf(*t.c), t.id, notes)...)
	}
	return out, nil
}

func duplicateNotes(p *Pass, email, contactID string, notes []hubspot.Note) []Finding {
	var out []Finding
	for _, n := range notes {
		for _, o := range notes {
			if o.ExternalID == "" || o.ID == n.ID || n.ExternalID == o.ExternalID {
				continue
			}
			why := ""
			if strings.Contains(n.Body, o.ExternalID) {
				why = "names our event " + o.ExternalID + " in its body"
			} else if text := replyText(o.Body); n.ExternalID == "" && len(text) >= minRepeat && strings.Contains(plain(n.Body), text) {
				why = "repeats the reply text of our note"
			}
			if why == "" {
				continue
			}
			f := newFinding(p, DuplicateActivity, "hubspot", n.ID)
			f.Contact = email
			f.Where = "hubspot note " + n.ID + " on contact " + contactID
			f.Found = "a second note for one reply: note " + n.ID + " " + why + " (our note " + o.ID + ", event " + o.ExternalID + ")"
			if n.ExternalID == "" {
				f.Found += "; it carries no exacto_event_id, so it was made outside Exacto"
			}
			f.Repair = "review and remove the copy in HubSpot; Exacto deletes nothing"
			out = append(out, f)
			break
		}
	}
	return out
}

var (
	paragraph = regexp.MustCompile(`(?s)<p>(.*?)</p>`)
	tag       = regexp.MustCompile(`<[^>]*>`)
	space     = regexp.MustCompile(`\s+`)
)

// plain is an HTML note body as text: tags dropped, entities decoded, white space
// collapsed, lower-cased.
func plain(body string) string {
	s := strings.ReplaceAll(body, "<br>", " ")
	s = html.UnescapeString(tag.ReplaceAllString(s, " "))
	return strings.TrimSpace(space.ReplaceAllString(strings.ToLower(s), " "))
}

// replyText is the reply's own text in a note the crmwriter wrote: its paragraphs
// without the header (Reply received, From, Subject), the automatic-reply mark, the
// event line and the classification, as plain text.
func replyText(body string) string {
	var parts []string
	for _, m := range paragraph.FindAllStringSubmatch(body, -1) {
		inner := m[1]
		if strings.HasPrefix(inner, "<strong>") || strings.HasPrefix(inner, "<em>") || strings.HasPrefix(inner, "Exacto event ") {
			continue
		}
		parts = append(parts, inner)
	}
	return plain(strings.Join(parts, " "))
}
