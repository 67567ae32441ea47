package handler

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	"exacto.dev/pkg/consumer"
	"exacto.dev/pkg/envelope"
	"exacto.dev/pkg/platform/instantly"
	"exacto.dev/pkg/retry"
)

// How the stopper stops an Instantly lead (docs/platforms.md has the references):
//
//   - A campaign whose settings say stop_on_reply stops a replying lead itself: for a
//     reply there, Exacto writes nothing and only confirms that the lead left Active.
//   - Otherwise the lead is given an interest value, which completes its sequence (the
//     v1 reference says so; v2 does not deny it, and the stop is confirmed by reading
//     the lead back): the value it already has, if any (never a worse one), else the
//     neutral custom label StopLabel — never Not Interested, which would take a hot lead
//     out of the Interested views and fire lead_not_interested automations.
//   - Before a value is given, the campaign's subsequences are read: one that starts on
//     that value would send more e-mail, so the lead is taken out of it at once.
//   - Confirmation is bounded: Instantly updates leads in a background job, so a lead
//     still Active is read again on the next attempts; after confirmAttempts it is a
//     dead letter saying so (a person must look), never an endless retry.
//   - After classification (reply.classified) an interested reply's lead becomes
//     Interested and a meeting request's Meeting Booked, unless it is already at that
//     value or further (Meeting Completed, Won): a label is only ever raised.

// StopLabel is the neutral custom lead label Exacto gives a lead to stop its sequence.
const (
	StopLabel       = "Stopped by Exacto"
	stopDescription = "Exacto stopped this lead's sequence (a reply, an unsubscribe, a bounce or a complaint). Neutral: the reply's classification, or a person, sets Interested or another status."
)

// Bounds on waiting for Instantly, in time (the stopper's backoff doubles from a
// second, so each is a few reads), and never past the consumer's last attempt:
//   - OwnStopWait: a campaign that stops replies itself is given this long from the
//     reply's receipt to show the lead stopped; then Exacto stops it.
//   - ConfirmWait: a stop or a label Exacto gave is read back for this long from the
//     event's first attempt; then the event is a dead letter that says so.
//   - SubsequenceSettle: Instantly enrols a lead in a subsequence in a background job
//     after its interest value changes; a lead whose value starts a subsequence of its
//     campaign is read again until this long after that change (its
//     timestamp_last_interest_change), and taken out of the subsequence if it entered.
//
// They are variables for tests only.
var (
	OwnStopWait       = 15 * time.Second
	ConfirmWait       = 3 * time.Minute
	SubsequenceSettle = 30 * time.Second
)

// givenUp reports whether waiting for Instantly to show what it accepted has lasted
// long enough for ev.
func givenUp(ev consumer.Event) bool {
	return ev.Last || (!ev.FirstAttempt.IsZero() && time.Since(ev.FirstAttempt) >= ConfirmWait)
}

// errNotYetStopped: the platform accepted the stop but does not show it yet (Instantly
// runs it as a background job). The next attempt reads again before writing.
var errNotYetStopped = errors.New("stop accepted but not yet visible")

// What every reply of a campaign asks the same of Instantly is read once a while:
//   - campaignTTL: a campaign's stop settings (stop_on_reply).
//   - subsequenceTTL: its subsequences, read for each interest value given (and again
//     while the enrolment it may start settles) — in a burst, one request a reply
//     otherwise, a quarter of a stop's. A subsequence made at Instantly less than this
//     before a stop is not yet watched for (docs/platforms.md, residual risks).
const campaignTTL = 5 * time.Minute

var subsequenceTTL = 30 * time.Second // a variable for tests only

// ofCampaign keeps, for ttl, what was read of each Instantly campaign (by client and
// campaign id).
type ofCampaign[V any] struct {
	ttl  time.Duration
	mu   sync.Mutex
	seen map[campaignKey]readAt[V]
}

type campaignKey struct {
	c  *instantly.Client
	id string
}

type readAt[V any] struct {
	v  V
	at time.Time
}

// get is what was read of campaign id at c less than ttl ago, else what read reads now.
func (o *ofCampaign[V]) get(c *instantly.Client, id string, read func() (V, error)) (V, error) {
	k := campaignKey{c, id}
	o.mu.Lock()
	if hit, ok := o.seen[k]; ok && time.Since(hit.at) < o.ttl {
		o.mu.Unlock()
		return hit.v, nil
	}
	o.mu.Unlock()
	v, err := read()
	if err != nil {
		return v, err
	}
	o.mu.Lock()
	if o.seen == nil {
		o.seen = map[campaignKey]readAt[V]{}
	}
	o.seen[k] = readAt[V]{v, time.Now()}
	o.mu.Unlock()
	return v, nil
}

// campaign is campaign id's stop settings.
func (h *handler) campaign(ctx context.Context, ev consumer.Event, c *instantly.Client, id string) (instantly.Campaign, error) {
	return h.campaigns.get(c, id, func() (cp instantly.Campaign, err error) {
		err = ev.Call(ctx, Instantly, func(ctx context.Context) (err error) {
			cp, err = c.GetCampaign(ctx, id)
			return err
		})
		if err != nil {
			err = fmt.Errorf("read campaign %s: %w", id, err)
		}
		return cp, err
	})
}

// instantly stops every lead of the contact at Instantly (in the event's campaign
// when it is an Instantly event naming one).
func (h *handler) instantly(ctx context.Context, ev consumer.Event, c *instantly.Client, cause string) (stop, error) {
	env := ev.Envelope
	addr := email(env)
	if addr == "" {
		return stop{}, nil // Instantly finds leads by e-mail only
	}
	campaign := ""
	if env.Provider == Instantly {
		campaign = campaignID(env)
	}
	var leads []instantly.Lead
	if err := ev.Call(ctx, Instantly, func(ctx context.Context) (err error) {
		leads, err = c.FindLeads(ctx, campaign, addr)
		return err
	}); err != nil {
		return stop{}, err
	}
	if len(leads) == 0 {
		return stop{}, nil
	}
	s := stop{found: true}
	if len(leads) == 1 {
		s.leadID = leads[0].ID
	}
	var errs []error
	for _, l := range leads { // every lead on each attempt: one slow lead holds no other
		wrote, err := h.stopLead(ctx, ev, c, l, cause)
		s.wrote = s.wrote || wrote
		errs = append(errs, err)
	}
	return s, combine(errs...)
}

// stopLead stops one lead: nothing if it is stopped (but out of any subsequence, once
// settled); only a confirmation, for a while, where the campaign stops replies itself;
// else the lead's own interest value or StopLabel, given again on each attempt until
// Instantly shows the lead stopped (the same value twice is harmless); a write still not
// shown once givenUp is a dead letter.
func (h *handler) stopLead(ctx context.Context, ev consumer.Event, c *instantly.Client, l instantly.Lead, cause string) (wrote bool, err error) {
	if l.Stopped() {
		if l.SubsequenceID != "" { // stopped, but a subsequence is sending to it
			if err := h.leaveSubsequence(ctx, ev, c, l); err != nil {
				return true, err
			}
			wrote = true
		}
		return wrote, h.settled(ctx, ev, c, l)
	}
	env := ev.Envelope
	if cause == causeReply && env.Provider == Instantly && !ev.Last && time.Since(env.ReceivedAt) < OwnStopWait {
		// Only Instantly's own reply can make Instantly stop the lead itself.
		cp, err := h.campaign(ctx, ev, c, l.Campaign)
		if err != nil {
			return false, err
		}
		if cp.StopOnReply {
			return false, retry.Transiently(Instantly, fmt.Errorf("lead %s in campaign %s: the campaign stops on reply itself: %w", l.ID, l.Campaign, errNotYetStopped))
		}
	}
	label, err := h.stopLabel(ctx, ev, c)
	if err != nil {
		return false, err
	}
	value := label.InterestStatus
	if l.InterestStatus != nil {
		value = *l.InterestStatus // never another value than it has
	}
	if err := h.setInterest(ctx, ev, c, l, value); err != nil {
		if value == label.InterestStatus && retry.Of(err).Class == retry.Permanent {
			// The label was deleted at Instantly since it was looked up: look again.
			c.ForgetLabel(StopLabel)
			return false, retry.Transiently(Instantly, fmt.Errorf("the stop label was refused (deleted at Instantly?); it is looked up again: %w", err))
		}
		return false, err
	}
	now, err := h.readBack(ctx, ev, c, l)
	if err != nil {
		return true, err
	}
	if !now.Stopped() {
		// Only after a write: an attempt that never reached Instantly (its breaker was
		// open for minutes) has written nothing to wait for.
		if givenUp(ev) {
			return true, retry.Permanently(Instantly, fmt.Errorf("lead %s (%s) in campaign %s: Instantly accepted the stop but still shows the lead active %v after the first attempt: "+
				"the campaign does not stop on an interest status; stop the lead at Instantly", l.ID, email(env), l.Campaign, time.Since(ev.FirstAttempt).Round(time.Second)))
		}
		return true, retry.Transiently(Instantly, fmt.Errorf("lead %s in campaign %s: %w", l.ID, l.Campaign, errNotYetStopped))
	}
	return true, h.settled(ctx, ev, c, now)
}

// stopLabel is the workspace's StopLabel, made when it has none.
func (h *handler) stopLabel(ctx context.Context, ev consumer.Event, c *instantly.Client) (label instantly.LeadLabel, err error) {
	err = ev.Call(ctx, Instantly, func(ctx context.Context) (err error) {
		label, err = c.EnsureLabel(ctx, StopLabel, instantly.KindNeutral, stopDescription)
		return err
	})
	if err != nil {
		return label, fmt.Errorf("the stop label: %w", err)
	}
	return label, nil
}

// settled fails the attempt, transiently, while Instantly may still enrol lead l in a
// subsequence its interest value starts (SubsequenceSettle after its last interest
// change): the next attempt reads it again and takes it out if it entered. On the
// last attempt it is logged instead: the stop itself holds.
func (h *handler) settled(ctx context.Context, ev consumer.Event, c *instantly.Client, l instantly.Lead) error {
	if l.InterestStatus == nil {
		return nil
	}
	changed, err := time.Parse(time.RFC3339Nano, l.TimestampLastInterestChange)
	if err != nil || time.Since(changed) >= SubsequenceSettle {
		return nil
	}
	if _, starts, err := h.startedBy(ctx, ev, c, l.Campaign, *l.InterestStatus); err != nil || !starts {
		return err
	}
	if ev.Last {
		h.log.WarnContext(ctx, "a subsequence starts on the lead's value and Instantly may still enrol it", "id", ev.Envelope.ID, "lead", l.ID)
		return nil
	}
	return retry.Transiently(Instantly, fmt.Errorf("lead %s: a subsequence of campaign %s starts on its value %d, changed %s ago: read again once Instantly's enrolment has run",
		l.ID, l.Campaign, *l.InterestStatus, time.Since(changed).Round(time.Second)))
}

// readBack reads lead l again after a write, taking it out of a subsequence the write
// put it in.
func (h *handler) readBack(ctx context.Context, ev consumer.Event, c *instantly.Client, l instantly.Lead) (instantly.Lead, error) {
	var now instantly.Lead
	if err := ev.Call(ctx, Instantly, func(ctx context.Context) (err error) {
		now, err = c.GetLead(ctx, l.ID)
		return err
	}); err != nil {
		return now, err
	}
	if now.SubsequenceID != "" {
		return now, h.leaveSubsequence(ctx, ev, c, now)
	}
	return now, nil
}

// setInterest gives lead l the interest value after reading the campaign's
// subsequences: the value is given either way (it is what stops the sequence, or the
// label the reply deserves), and a lead a subsequence takes in is taken out of it
// before its first step (leaveSubsequence, on the read that follows).
func (h *handler) setInterest(ctx context.Context, ev consumer.Event, c *instantly.Client, l instantly.Lead, value int) error {
	sub, starts, err := h.startedBy(ctx, ev, c, l.Campaign, value)
	if err != nil {
		return err
	}
	if starts {
		h.log.InfoContext(ctx, "a subsequence starts on the interest value; the lead will be taken out of it", "id", ev.Envelope.ID,
			"lead", l.ID, "campaign", l.Campaign, "subsequence", sub.ID, "value", value)
	}
	return ev.Call(ctx, Instantly, func(ctx context.Context) error {
		return c.SetInterest(ctx, l.Campaign, email(ev.Envelope), &value)
	})
}

// startedBy is the subsequence of campaign that a lead given value enters, if any.
func (h *handler) startedBy(ctx context.Context, ev consumer.Event, c *instantly.Client, campaign string, value int) (instantly.Subsequence, bool, error) {
	subs, err := h.subsequences.get(c, campaign, func() (subs []instantly.Subsequence, err error) {
		err = ev.Call(ctx, Instantly, func(ctx context.Context) (err error) {
			subs, err = c.Subsequences(ctx, campaign)
			return err
		})
		return subs, err
	})
	if err != nil {
		return instantly.Subsequence{}, false, fmt.Errorf("read campaign %s's subsequences: %w", campaign, err)
	}
	i := slices.IndexFunc(subs, func(s instantly.Subsequence) bool { return s.StartsOn(value) })
	if i < 0 {
		return instantly.Subsequence{}, false, nil
	}
	return subs[i], true, nil
}

// leaveSubsequence takes lead l out of the subsequence it is in and confirms it left.
func (h *handler) leaveSubsequence(ctx context.Context, ev consumer.Event, c *instantly.Client, l instantly.Lead) error {
	var now instantly.Lead
	if err := ev.Call(ctx, Instantly, func(ctx context.Context) (err error) {
		now, err = c.RemoveFromSubsequence(ctx, l.ID)
		return err
	}); err != nil {
		return fmt.Errorf("take lead %s out of subsequence %s: %w", l.ID, l.SubsequenceID, err)
	}
	h.log.InfoContext(ctx, "lead taken out of a subsequence", "id", ev.Envelope.ID, "lead", l.ID, "subsequence", l.SubsequenceID)
	if now.SubsequenceID != "" {
		return retry.Transiently(Instantly, fmt.Errorf("lead %s is still in subsequence %s", l.ID, now.SubsequenceID))
	}
	return nil
}

// labels are the interest values a classification earns at Instantly: only the
// positive ones are written (anything else keeps the neutral stop label: a person
// decides what a negative reply means for the lead).
var labels = map[string]int{"interested": instantly.Interested, "meeting_request": instantly.MeetingBooked}

// Label is the Instantly interest value a reply classified as label earns, ok false
// when none is written.
func Label(label string) (value int, ok bool) {
	value, ok = labels[label]
	return value, ok
}

// labelLead raises the lead of an Instantly reply to the interest value its
// classification earns: from no value, the neutral StopLabel, Out of Office, or a
// lower positive one — never over a negative value or a custom label someone gave
// (a person's decision stands) and never lower. Given on each attempt until Instantly
// shows it (until givenUp), read back, and any subsequence it starts left at once.
func (h *handler) labelLead(ctx context.Context, ev consumer.Event, c *instantly.Client, value int) error {
	env := ev.Envelope
	var leads []instantly.Lead
	if err := ev.Call(ctx, Instantly, func(ctx context.Context) (err error) {
		leads, err = c.FindLeads(ctx, campaignID(env), email(env))
		return err
	}); err != nil {
		return err
	}
	var errs []error
	for _, l := range leads {
		errs = append(errs, h.raise(ctx, ev, c, l, value))
	}
	return combine(errs...)
}

func (h *handler) raise(ctx context.Context, ev consumer.Event, c *instantly.Client, l instantly.Lead, value int) error {
	env := ev.Envelope
	if cur := l.InterestStatus; cur == nil || *cur != value {
		keep, err := h.keeps(ctx, ev, c, cur, value)
		if err != nil {
			return err
		}
		if !keep {
			if err := h.setInterest(ctx, ev, c, l, value); err != nil {
				return err
			}
			now, err := h.readBack(ctx, ev, c, l)
			if err != nil {
				return err
			}
			if now.InterestStatus == nil || *now.InterestStatus != value {
				if givenUp(ev) {
					return retry.Permanently(Instantly, fmt.Errorf("lead %s: Instantly accepted interest value %d but does not show it %v after the first attempt",
						l.ID, value, time.Since(ev.FirstAttempt).Round(time.Second)))
				}
				return retry.Transiently(Instantly, fmt.Errorf("lead %s: interest value %d not yet visible", l.ID, value))
			}
			h.log.InfoContext(ctx, "lead labelled from its reply's classification", "id", env.ID, "lead", l.ID, "campaign", l.Campaign,
				"label", env.Data.Classification.Label, "value", value)
			return h.settled(ctx, ev, c, now)
		}
		h.log.InfoContext(ctx, "the lead's interest value is kept: as good already, or given by someone", "id", env.ID,
			"lead", l.ID, "value", *cur, "earned", value)
	}
	// At the value already, or at one kept: only what it may start is looked after.
	if l.SubsequenceID != "" {
		if err := h.leaveSubsequence(ctx, ev, c, l); err != nil {
			return err
		}
	}
	return h.settled(ctx, ev, c, l)
}

// keeps reports whether a lead's interest value cur stays rather than become value:
// none, Out of Office and the neutral StopLabel are raised; a positive value only to
// a higher one; a negative value or another custom label is someone's decision.
func (h *handler) keeps(ctx context.Context, ev consumer.Event, c *instantly.Client, cur *int, value int) (bool, error) {
	switch {
	case cur == nil || *cur == instantly.OutOfOffice:
		return false, nil
	case instantly.Positive(*cur):
		return *cur >= value, nil
	}
	// Any "Stopped by Exacto" label is the stop label: replicas that made it at once
	// may each have made one.
	var stop bool
	err := ev.Call(ctx, Instantly, func(ctx context.Context) (err error) {
		stop, err = c.IsLabel(ctx, StopLabel, instantly.KindNeutral, *cur)
		return err
	})
	return !stop, err
}

// classifiedLabel is what a reply.classified asks of Instantly: the interest value,
// or ok false when the event asks nothing (another provider, another label, no
// e-mail).
func classifiedLabel(env envelope.Envelope) (value int, ok bool) {
	if env.Type != envelope.TypeReplyClassified || env.Provider != Instantly || env.Data.Classification == nil || email(env) == "" {
		return 0, false
	}
	return Label(env.Data.Classification.Label)
}
