package stream

import "testing"

func TestTakes(t *testing.T) {
	stopper, _ := SubscriptionOf(Stopper)
	projector, _ := SubscriptionOf(Projector)
	cases := []struct {
		sub     Subscription
		subject string
		want    bool
	}{
		{stopper, "events.acme.instantly.reply.received", true},
		{stopper, "events.acme.generic.email.complained", true},
		{stopper, "events.acme.instantly.email.opened", false},
		{stopper, "events.acme.instantly.reply.received.extra", false},
		{stopper, "events.acme.reply.received", false},
		{projector, "events.acme.instantly.email.opened", true},
		{projector, "events", false},
		{projector, "outcomes.acme.instantly.email.opened", false},
	}
	for _, c := range cases {
		if got := c.sub.Takes(c.subject); got != c.want {
			t.Errorf("%s takes %s: %v, want %v", c.sub.Durable, c.subject, got, c.want)
		}
	}
}
