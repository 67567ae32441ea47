package confirm

import (
	"cmp"
	"context"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"time"

	"exacto.dev/pkg/envelope"
	"exacto.dev/pkg/platform"
	"exacto.dev/pkg/platform/accounts"
	"exacto.dev/pkg/platform/instantly"
	"exacto.dev/pkg/platform/smartlead"
)

// Call makes one call to a platform (consumer.Event.Call: pacer, breaker).
type Call func(ctx context.Context, dep string, fn func(ctx context.Context) error) error

// Askable says whether Ask can confirm env at its source: an event of a sending platform
// (Instantly, Smartlead) of a type the platform keeps a trace of.
func Askable(env envelope.Envelope) bool {
	switch env.Provider {
	case "instantly", "smartlead":
	default:
		return false
	}
	switch env.Type {
	case envelope.TypeReplyReceived, envelope.TypeLeadUnsubscribed, envelope.TypeEmailBounced:
		return true
	}
	return false
}

// timeSlack is how far apart the webhook's time and the source's may be for one reply
// found by time (no id to match): clocks and queues differ, never by a day.
const timeSlack = 10 * time.Minute

// Ask reads at the event's platform whether it holds what env says happened.
func Ask(ctx context.Context, call Call, c accounts.Clients, env envelope.Envelope) (Verdict, error) {
	email, campaign := "", ""
	if ct := env.Data.Contact; ct != nil {
		email = strings.ToLower(strings.TrimSpace(ct.Email))
	}
	if cp := env.Data.Campaign; cp != nil {
		campaign = cp.ID
	}
	switch env.Provider {
	case "instantly":
		if email == "" {
			return Verdict{Said: "the event names no lead e-mail to ask Instantly about"}, nil
		}
		return askInstantly(ctx, call, c.Instantly, env, email, campaign)
	case "smartlead":
		return askSmartlead(ctx, call, c.Smartlead, env, email, campaign)
	}
	return Verdict{}, fmt.Errorf("confirm: %s is not a source Exacto can ask", env.Provider)
}

func askInstantly(ctx context.Context, call Call, c *instantly.Client, env envelope.Envelope, email, campaign string) (Verdict, error) {
	switch env.Type {
	case envelope.TypeReplyReceived:
		id := ""
		if m := env.Data.Message; m != nil {
			id = m.ID
		}
		if id == "" {
			var list []instantly.Email
			if err := call(ctx, "instantly", func(ctx context.Context) (err error) {
				list, err = c.ReceivedEmails(ctx, email, campaign, 10)
				return err
			}); err != nil {
				return Verdict{}, err
			}
			for _, e := range list {
				if e.Received() && within(e.Time(), env.Time) {
					return replyVerdict(e), nil
				}
			}
			return Verdict{Said: fmt.Sprintf("Instantly holds no e-mail received from %s within %s of %s", email, timeSlack, env.Time.UTC().Format(time.RFC3339))}, nil
		}
		var e instantly.Email
		err := call(ctx, "instantly", func(ctx context.Context) (err error) {
			e, err = c.GetEmail(ctx, id)
			return err
		})
		switch {
		case platform.StatusOf(err) == http.StatusNotFound:
			return Verdict{Said: "Instantly has no e-mail " + id}, nil
		case err != nil:
			return Verdict{}, err
		case !e.Received():
			return Verdict{Said: fmt.Sprintf("Instantly's e-mail %s is not one received from the lead (ue_type %d)", id, e.Type)}, nil
		case !strings.EqualFold(e.Lead, email) && !strings.EqualFold(e.From, email):
			return Verdict{Said: fmt.Sprintf("Instantly's e-mail %s is from %s, not %s", id, e.From, email)}, nil
		case campaign != "" && e.CampaignID != "" && e.CampaignID != campaign:
			return Verdict{Said: fmt.Sprintf("Instantly's e-mail %s belongs to campaign %s, not %s", id, e.CampaignID, campaign)}, nil
		}
		return replyVerdict(e), nil
	case envelope.TypeLeadUnsubscribed, envelope.TypeEmailBounced:
		want, what := instantly.StatusUnsubscribed, "unsubscribed"
		if env.Type == envelope.TypeEmailBounced {
			want, what = instantly.StatusBounced, "bounced"
		}
		var leads []instantly.Lead
		if err := call(ctx, "instantly", func(ctx context.Context) (err error) {
			leads, err = c.FindLeads(ctx, campaign, email)
			return err
		}); err != nil {
			return Verdict{}, err
		}
		var seen []string
		for _, l := range leads {
			if l.Status == want {
				return Verdict{Confirmed: true, Said: fmt.Sprintf("Instantly shows lead %s in campaign %s %s", l.ID, l.Campaign, what)}, nil
			}
			seen = append(seen, fmt.Sprintf("lead %s in campaign %s status %d", l.ID, l.Campaign, l.Status))
		}
		if env.Type == envelope.TypeLeadUnsubscribed {
			var blocked bool
			if err := call(ctx, "instantly", func(ctx context.Context) (err error) {
				blocked, err = c.Blocked(ctx, email)
				return err
			}); err != nil {
				return Verdict{}, err
			}
			if blocked {
				return Verdict{Confirmed: true, Said: "Instantly's block list holds " + email}, nil
			}
			seen = append(seen, "not on the block list")
		}
		if len(leads) == 0 {
			seen = append([]string{"no lead " + email + inCampaign(campaign)}, seen...)
		}
		return Verdict{Said: "Instantly shows " + strings.Join(seen, "; ")}, nil
	}
	return Verdict{}, fmt.Errorf("confirm: Instantly keeps no trace of %s to ask about", env.Type)
}

func inCampaign(c string) string {
	if c == "" {
		return ""
	}
	return " in campaign " + c
}

func replyVerdict(e instantly.Email) Verdict {
	v := Verdict{Confirmed: true, Text: e.Body.Text,
		Said: fmt.Sprintf("Instantly holds e-mail %s received from %s at %s", e.ID, cmp.Or(e.From, e.Lead), e.Timestamp)}
	if e.IsAutoReply == 1 {
		v.Said += " (an automatic reply)"
	}
	return v
}

func within(a, b time.Time) bool {
	d := a.Sub(b)
	return !a.IsZero() && d < timeSlack && d > -timeSlack
}

// bounceWindow is how long before a bounce's webhook its e-mail may have been sent.
const bounceWindow = time.Hour

func askSmartlead(ctx context.Context, call Call, c *smartlead.Client, env envelope.Envelope, email, campaign string) (Verdict, error) {
	// The lead: by the id the event carries, else by e-mail.
	var lead smartlead.Lead
	if ct := env.Data.Contact; ct != nil && ct.ExternalID != "" {
		n, err := strconv.ParseInt(ct.ExternalID, 10, 64)
		if err != nil {
			return Verdict{Said: fmt.Sprintf("the event's lead id %q is not a Smartlead id", ct.ExternalID)}, nil
		}
		lead.ID = n
	}
	if lead.ID == 0 || env.Type == envelope.TypeLeadUnsubscribed {
		if email == "" {
			return Verdict{Said: "the event names no lead to ask Smartlead about"}, nil
		}
		var found bool
		if err := call(ctx, "smartlead", func(ctx context.Context) (err error) {
			lead, found, err = c.LeadByEmail(ctx, email)
			return err
		}); err != nil {
			return Verdict{}, err
		}
		if !found {
			return Verdict{Said: "Smartlead has no lead " + email}, nil
		}
	}
	if env.Type == envelope.TypeLeadUnsubscribed {
		if lead.Unsubscribed {
			return Verdict{Confirmed: true, Said: fmt.Sprintf("Smartlead shows lead %d unsubscribed", lead.ID)}, nil
		}
		return Verdict{Said: fmt.Sprintf("Smartlead shows lead %d subscribed", lead.ID)}, nil
	}
	cid, err := strconv.ParseInt(campaign, 10, 64)
	if err != nil {
		return Verdict{Said: fmt.Sprintf("the event's campaign %q is not a Smartlead campaign id", campaign)}, nil
	}
	switch env.Type {
	case envelope.TypeReplyReceived:
		var history []smartlead.Message
		err := call(ctx, "smartlead", func(ctx context.Context) (err error) {
			history, err = c.MessageHistory(ctx, cid, lead.ID)
			return err
		})
		if platform.StatusOf(err) == http.StatusNotFound {
			return Verdict{Said: fmt.Sprintf("Smartlead has no lead %d in campaign %d", lead.ID, cid)}, nil
		}
		if err != nil {
			return Verdict{}, err
		}
		id := ""
		if m := env.Data.Message; m != nil {
			id = m.ID
		}
		for _, m := range history {
			if m.Reply() && ((id != "" && m.MessageID == id) || (id == "" && within(m.At(), env.Time))) {
				return Verdict{Confirmed: true, Text: m.Body,
					Said: fmt.Sprintf("Smartlead's history of lead %d in campaign %d holds the reply %s of %s", lead.ID, cid, m.MessageID, m.Time)}, nil
			}
		}
		return Verdict{Said: fmt.Sprintf("Smartlead's history of lead %d in campaign %d holds no reply %s (%d messages)", lead.ID, cid, id, len(history))}, nil
	case envelope.TypeEmailBounced:
		var cl smartlead.CampaignLead
		var found bool
		if err := call(ctx, "smartlead", func(ctx context.Context) (err error) {
			// The bounced e-mail was sent shortly before its bounce: the campaign's bounced
			// leads active since an hour before are few, whatever the campaign's size.
			f := smartlead.Filter{EmailStatus: "is_bounced", ActiveAfter: env.Time.Add(-bounceWindow)}
			cl, found, err = c.FindInCampaign(ctx, cid, lead.ID, f, 2)
			return err
		}); err != nil {
			return Verdict{}, err
		}
		if found {
			return Verdict{Confirmed: true, Said: fmt.Sprintf("Smartlead shows lead %d bounced in campaign %d (status %s)", lead.ID, cid, cl.Status)}, nil
		}
		return Verdict{Said: fmt.Sprintf("Smartlead shows no bounce of lead %d among campaign %d's bounced leads", lead.ID, cid)}, nil
	}
	return Verdict{}, fmt.Errorf("confirm: Smartlead keeps no trace of %s to ask about", env.Type)
}
