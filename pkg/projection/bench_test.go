package projection

import (
	"context"
	"fmt"
	"testing"
	"time"

	"exacto.dev/pkg/envelope"
)

// BenchmarkReplyInACampaign is the live projector's work for one reply of a contact in
// a campaign of 15,000 (the memory row's): the contact record and its member merged
// and written. Reported beside time and allocations: the bytes written to the
// campaigns projection per reply, which grow with what one write of a member rewrites.
func BenchmarkReplyInACampaign(b *testing.B) {
	ctx := context.Background()
	const members = 15000
	campaigns := &countingStore{Store: NewMemory()}
	s := Remembering(Stores{Contacts: NewMemory(), Campaigns: campaigns, Suppression: NewMemory()})
	email := func(i int) string { return fmt.Sprintf("lead%d@northwind.example", i) }
	for i := range members {
		if _, err := apply(ctx, s, nil, event(i, envelope.TypeEmailSent, email(i), "camp-1", time.Minute)); err != nil {
			b.Fatal(err)
		}
	}
	campaigns.written.Store(0)
	b.ReportAllocs()
	n := 0
	for b.Loop() {
		i := n % members
		if _, err := apply(ctx, s, nil, event(n, envelope.TypeReplyReceived, email(i), "camp-1", time.Hour+time.Duration(n)*time.Millisecond)); err != nil {
			b.Fatal(err)
		}
		n++
	}
	b.ReportMetric(float64(campaigns.written.Load())/float64(n), "campaign-bytes/reply")
}
