// Package dlqtest is a sample dead-letter queue for tests of the DLQ filters: letters
// across two consumers, two tenants, two providers, three types, both error classes
// and different ages, and the filters that must pick exactly each subset of them (so
// a filter that widens, narrows or swaps two subject tokens fails). pkg/dlq, the
// console and the `exacto dlq` command test their filters against the same table.
package dlqtest

import (
	"cmp"
	"context"
	"encoding/json"
	"slices"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"exacto.dev/pkg/consumer"
	"exacto.dev/pkg/envelope"
	"exacto.dev/pkg/stream"
)

// Letter is one sample dead letter; Age is how long before now it was last tried
// (and when its event happened).
type Letter struct {
	Name                                    string
	Consumer, Tenant, Provider, Type, Class string
	Age                                     time.Duration
}

// Letters are the sample.
var Letters = []Letter{
	{"acme-instantly-reply", stream.CRMWriter, "acme", "instantly", envelope.TypeReplyReceived, "permanent", 10 * time.Minute},
	{"acme-smartlead-reply", stream.CRMWriter, "acme", "smartlead", envelope.TypeReplyReceived, "transient", 2 * time.Hour},
	{"acme-instantly-stop", stream.Stopper, "acme", "instantly", envelope.TypeReplyReceived, "permanent", 5 * time.Hour},
	{"globex-instantly-bounce", stream.CRMWriter, "globex", "instantly", envelope.TypeEmailBounced, "transient", 30 * time.Minute},
	{"globex-smartlead-stop", stream.Stopper, "globex", "smartlead", envelope.TypeReplyReceived, "permanent", 26 * time.Hour},
	{"globex-smartlead-meeting", stream.CRMWriter, "globex", "smartlead", envelope.TypeMeetingBooked, "permanent", 3 * time.Hour},
}

// Case is one filter (empty fields match everything) and the names of the letters it
// must select, oldest first.
type Case struct {
	Consumer, Tenant, Provider, Type, Class string
	OlderThan, NewerThan                    time.Duration
	Want                                    []string
}

// Cases are the filters, each alone and combined.
var Cases = []Case{
	{Want: []string{"globex-smartlead-stop", "acme-instantly-stop", "globex-smartlead-meeting", "acme-smartlead-reply", "globex-instantly-bounce", "acme-instantly-reply"}},
	{Consumer: stream.Stopper, Want: []string{"globex-smartlead-stop", "acme-instantly-stop"}},
	{Tenant: "globex", Want: []string{"globex-smartlead-stop", "globex-smartlead-meeting", "globex-instantly-bounce"}},
	{Provider: "smartlead", Want: []string{"globex-smartlead-stop", "globex-smartlead-meeting", "acme-smartlead-reply"}},
	{Type: envelope.TypeReplyReceived, Want: []string{"globex-smartlead-stop", "acme-instantly-stop", "acme-smartlead-reply", "acme-instantly-reply"}},
	{Type: envelope.TypeEmailBounced, Want: []string{"globex-instantly-bounce"}},
	{Class: "transient", Want: []string{"acme-smartlead-reply", "globex-instantly-bounce"}},
	{Class: "permanent", Consumer: stream.CRMWriter, Want: []string{"globex-smartlead-meeting", "acme-instantly-reply"}},
	{OlderThan: time.Hour, Want: []string{"globex-smartlead-stop", "acme-instantly-stop", "globex-smartlead-meeting", "acme-smartlead-reply"}},
	{NewerThan: time.Hour, Want: []string{"globex-instantly-bounce", "acme-instantly-reply"}},
	{OlderThan: time.Hour, NewerThan: 4 * time.Hour, Want: []string{"globex-smartlead-meeting", "acme-smartlead-reply"}},
	{Tenant: "acme", Provider: "smartlead", Want: []string{"acme-smartlead-reply"}},
	{Tenant: "globex", Provider: "instantly", Want: []string{"globex-instantly-bounce"}},
	{Consumer: stream.CRMWriter, Tenant: "globex", Provider: "smartlead", Type: envelope.TypeMeetingBooked, Want: []string{"globex-smartlead-meeting"}},
	// Each value in the wrong field selects nothing: the subject's tokens are in order.
	{Tenant: "smartlead"},
	{Provider: "acme"},
	{Consumer: "acme"},
	{Type: "reply"}, // a type is whole: reply.received is not "reply"
	{Class: "permanent", NewerThan: time.Hour, Tenant: "globex"},
}

// Publish stores every sample letter on EXACTO_DLQ as a consumer does, oldest first;
// it returns each letter's dead letter id by name.
func Publish(t testing.TB, js jetstream.JetStream, now time.Time) map[string]uint64 {
	t.Helper()
	ids := map[string]uint64{}
	for _, i := range oldestFirst { // so that the stream's order (List's) is the cases'
		ids[Letters[i].Name] = Store(t, js, now, Letters[i])
	}
	return ids
}

// Store stores l on EXACTO_DLQ as a consumer does (its event happened, and was last
// tried, l.Age before now; no guard record is written); it returns its dead letter id.
func Store(t testing.TB, js jetstream.JetStream, now time.Time, l Letter) uint64 {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	at := now.Add(-l.Age).UTC()
	env := envelope.Envelope{SpecVersion: "1.0", ID: envelope.ID(l.Tenant, l.Provider, l.Name), Source: l.Provider, Type: l.Type,
		Time: at, Tenant: l.Tenant, Provider: l.Provider, Endpoint: l.Provider, ProviderEventID: l.Name, ReceivedAt: at,
		Data: envelope.Data{ProviderType: l.Type, Contact: &envelope.Contact{Email: l.Name + "@example.com"}}}
	event, err := json.Marshal(env)
	if err != nil {
		t.Fatal(err)
	}
	dl, _ := json.Marshal(consumer.DeadLetter{Consumer: l.Consumer, EventID: env.ID, Tenant: l.Tenant, Provider: l.Provider, Type: l.Type,
		Error: "sample failure of " + l.Name, Class: l.Class, Attempts: 1, FirstAttempt: at, LastAttempt: at,
		Owner: "owner-of-" + l.Tenant, Event: event})
	ack, err := js.Publish(ctx, stream.DLQSubject(l.Consumer, l.Tenant, l.Provider, l.Type), dl)
	if err != nil {
		t.Fatal(err)
	}
	return ack.Sequence
}

// oldestFirst is Letters' indexes by decreasing age.
var oldestFirst = func() []int {
	idx := make([]int, len(Letters))
	for i := range idx {
		idx[i] = i
	}
	slices.SortFunc(idx, func(a, b int) int { return cmp.Compare(Letters[b].Age, Letters[a].Age) })
	return idx
}()

// Names maps dead letter ids back to the sample's names, in the order given.
func Names(ids map[string]uint64, seqs []uint64) []string {
	byID := map[uint64]string{}
	for name, id := range ids {
		byID[id] = name
	}
	out := make([]string, 0, len(seqs))
	for _, s := range seqs {
		if n, ok := byID[s]; ok {
			out = append(out, n)
		} else {
			out = append(out, "unknown")
		}
	}
	return out
}
