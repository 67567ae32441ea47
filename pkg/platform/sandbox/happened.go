package sandbox

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"time"

	"exacto.dev/pkg/envelope"
	"exacto.dev/pkg/providers"
	"exacto.dev/pkg/providers/registry"
)

// ControlHappened is POST /_sandbox/happened: {"provider": P, "body": <the webhook
// body P sends>} — what the body tells happened at the platform.
const ControlHappened = "/_sandbox/happened"

// ControlHappenedRequest is the body of POST /_sandbox/happened.
type ControlHappenedRequest struct {
	Provider string          `json:"provider"`
	Body     json.RawMessage `json:"body"`
}

// Happened makes the platform hold what a webhook of provider says happened there,
// before the webhook is sent, as the real platform does: a reply is in Instantly's
// unibox or Smartlead's message history (the lead counted as replied, and stopped when
// the campaign stops on reply); an unsubscribe or a bounce is on the lead. So an event
// confirmed at the source finds its truth there, and a forged one, never told, finds
// none. The body is read by the provider's own normaliser. Providers that are not a
// sandboxed platform (stripe, meta, …) have nothing to hold: an error says so.
func (s *Server) Happened(provider string, body []byte) error {
	spec, ok := registry.Lookup(provider)
	if !ok || (provider != "instantly" && provider != "smartlead") {
		return fmt.Errorf("sandbox: %q is not a platform the sandbox stands in for (instantly, smartlead)", provider)
	}
	p, err := spec.New(providers.Config{})
	if err != nil {
		return err
	}
	evs, err := p.Events(&providers.Request{Method: http.MethodPost, Body: body, Header: http.Header{}, Now: time.Now()})
	if err != nil {
		return fmt.Errorf("sandbox: the %s body does not parse: %w", provider, err)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, ev := range evs {
		if err := s.happened(provider, ev); err != nil {
			return err
		}
	}
	return nil
}

func (s *Server) happened(provider string, ev providers.Event) error {
	d := ev.Data
	email, campaign := "", ""
	if d.Contact != nil {
		email = strings.ToLower(d.Contact.Email)
	}
	if d.Campaign != nil {
		campaign = d.Campaign.ID
	}
	if email == "" {
		return errors.New("sandbox: the event names no e-mail address")
	}
	switch provider {
	case "instantly":
		if campaign == "" {
			return errors.New("sandbox: the Instantly event names no campaign")
		}
		switch ev.Type {
		case envelope.TypeReplyReceived:
			m := d.Message
			s.inst.reply(s.instantlyCampaign(campaign), campaign, email, m.ID, m.Text, m.Auto, ev.Time)
		case envelope.TypeLeadUnsubscribed, envelope.TypeEmailBounced:
			l := s.inst.leadIn(campaign, email)
			if l == nil {
				l = s.inst.lead(s.inst.add(campaign, email))
			}
			l.Status = InstantlyUnsubscribed
			if ev.Type == envelope.TypeEmailBounced {
				l.Status = InstantlyBounced
			}
		default:
			s.inst.enrol(campaign, []string{email})
		}
	case "smartlead":
		cid, err := strconv.ParseInt(campaign, 10, 64)
		if err != nil {
			return fmt.Errorf("sandbox: Smartlead campaign id %q is not a number", campaign)
		}
		if d.Contact.ExternalID != "" {
			id, err := strconv.ParseInt(d.Contact.ExternalID, 10, 64)
			if err != nil || id <= 0 {
				return fmt.Errorf("sandbox: Smartlead lead id %q is not a number", d.Contact.ExternalID)
			}
			if err := s.smart.adopt(email, id); err != nil {
				return err
			}
		}
		switch ev.Type {
		case envelope.TypeReplyReceived:
			m := d.Message
			s.smart.reply(cid, email, m.ID, m.Text, ev.Time)
		case envelope.TypeLeadUnsubscribed:
			s.smart.unsubscribe(s.smart.add(cid, email))
		case envelope.TypeEmailBounced:
			m := s.smart.member(cid, s.smart.add(cid, email))
			m.Status, m.Bounced, m.LastEvent = "BLOCKED", true, maxTime(m.LastEvent, ev.Time)
		default:
			s.smart.add(cid, email)
		}
	}
	return nil
}

func (s *Server) ctlHappened(w http.ResponseWriter, r *http.Request) {
	var req ControlHappenedRequest
	if err := readJSON(r, &req); err != nil || req.Provider == "" || len(req.Body) == 0 {
		writeJSON(w, http.StatusBadRequest, map[string]any{"error": `want {"provider": P, "body": {…the webhook body…}}`})
		return
	}
	if err := s.Happened(req.Provider, req.Body); err != nil {
		writeJSON(w, http.StatusBadRequest, map[string]any{"error": err.Error()})
		return
	}
	writeJSON(w, http.StatusOK, map[string]any{"happened": true})
}
