package config

import (
	"fmt"
	"regexp"
	"slices"
	"time"

	"exacto.dev/pkg/classify"
	"exacto.dev/pkg/envelope"
)

// SLOClass is one class of events with its service-level objective: Objective of its
// events (default 0.99) are completed by every consumer that acts on them within Target
// of their receipt at the gateway. A class matches by event type and, for
// reply.classified, by the reply's label (empty Labels: every label).
type SLOClass struct {
	Name      string        `yaml:"name"`
	Types     []string      `yaml:"types"`
	Labels    []string      `yaml:"labels"`
	Target    time.Duration `yaml:"target"`
	Objective float64       `yaml:"objective"`
}

// DefaultSLOs apply when the config sets none: the consequence of missing an
// unsubscribe or a positive reply (mail keeps going to someone who said stop or yes) is
// worse than a late open count, so their targets are tighter.
var DefaultSLOs = []SLOClass{
	{Name: "unsubscribe", Types: []string{envelope.TypeLeadUnsubscribed, envelope.TypeEmailComplained}, Target: time.Minute, Objective: 0.999},
	{Name: "positive_reply", Types: []string{envelope.TypeReplyClassified}, Labels: []string{"interested", "meeting_request"}, Target: time.Minute, Objective: 0.99},
	{Name: "reply", Types: []string{envelope.TypeReplyReceived, envelope.TypeReplyClassified, envelope.TypeMessageReceived}, Target: 2 * time.Minute, Objective: 0.99},
	{Name: "bounce", Types: []string{envelope.TypeEmailBounced}, Target: 5 * time.Minute, Objective: 0.99},
	{Name: "meeting", Types: []string{envelope.TypeMeetingBooked, envelope.TypeMeetingCancelled, envelope.TypeOpportunityCreated}, Target: 5 * time.Minute, Objective: 0.99},
	{Name: "engagement", Types: []string{envelope.TypeEmailSent, envelope.TypeEmailDelivered, envelope.TypeEmailOpened, envelope.TypeEmailClicked, envelope.TypeMessageStatus}, Target: 30 * time.Minute, Objective: 0.95},
}

// OtherSLO is the class of every event no configured class matches.
var OtherSLO = SLOClass{Name: "other", Target: 15 * time.Minute, Objective: 0.99}

// SLOOf is the class of an event of type typ (label: its classification, for
// reply.classified): the first configured class that matches, else OtherSLO.
func (c *Config) SLOOf(typ, label string) SLOClass {
	for _, s := range c.SLOs {
		if slices.Contains(s.Types, typ) && (len(s.Labels) == 0 || slices.Contains(s.Labels, label)) {
			return s
		}
	}
	return OtherSLO
}

// SLOClasses are the configured classes and OtherSLO.
func (c *Config) SLOClasses() []SLOClass { return append(slices.Clip(c.SLOs), OtherSLO) }

var sloName = regexp.MustCompile(`^[a-z][a-z0-9_]*$`)

func (c *Config) validateSLOs() []error {
	var errs []error
	fail := func(i int, format string, args ...any) {
		errs = append(errs, fmt.Errorf("%s: slos[%d]: %s", c.Source, i, fmt.Sprintf(format, args...)))
	}
	seen := map[string]bool{OtherSLO.Name: true}
	for i, s := range c.SLOs {
		if !sloName.MatchString(s.Name) {
			fail(i, "name %q: want lower-case letters, digits and _", s.Name)
		} else if seen[s.Name] {
			fail(i, "name %q is used twice (%q is the class of unmatched events)", s.Name, OtherSLO.Name)
		}
		seen[s.Name] = true
		if len(s.Types) == 0 {
			fail(i, "%s: types is empty", s.Name)
		}
		for _, t := range s.Types {
			if !slices.Contains(envelope.AllTypes, t) {
				fail(i, "%s: unknown event type %q", s.Name, t)
			}
		}
		for _, l := range s.Labels {
			if !slices.Contains(classify.Labels, l) {
				fail(i, "%s: unknown reply label %q", s.Name, l)
			}
		}
		if len(s.Labels) > 0 && !slices.Contains(s.Types, envelope.TypeReplyClassified) {
			fail(i, "%s: labels apply only to %s", s.Name, envelope.TypeReplyClassified)
		}
		if s.Target <= 0 {
			fail(i, "%s: target must be a positive duration", s.Name)
		}
		if s.Objective <= 0 || s.Objective >= 1 {
			fail(i, "%s: objective %v: want a share between 0 and 1, such as 0.99", s.Name, s.Objective)
		}
	}
	return errs
}
