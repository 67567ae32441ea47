package tests

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"io/fs"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"exacto.dev/pkg/consumer"
	"exacto.dev/pkg/envelope"
	"exacto.dev/pkg/privacy"
	"exacto.dev/pkg/projection"
	"exacto.dev/pkg/stream"
	classifier "exacto.dev/services/classifier/handler"
	crmwriter "exacto.dev/services/crmwriter/handler"
	projector "exacto.dev/services/projector/handler"
	stopper "exacto.dev/services/stopper/handler"
	suppressor "exacto.dev/services/suppressor/handler"
)

// onDisk lists the files under dir that hold needle, in any case.
func onDisk(t *testing.T, dir, needle string) []string {
	t.Helper()
	var found []string
	low := bytes.ToLower([]byte(needle))
	err := filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		data, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		if bytes.Contains(bytes.ToLower(data), low) {
			found = append(found, strings.TrimPrefix(path, dir))
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return found
}

// An erasure leaves nothing of the person on disk — their events, other people's
// events that name them, the projections, the contact directory, guards, outcomes,
// the quarantine — nor in a SQLite export made after; a rebuild equals the live
// projection, with them as an anonymous record; a later event about them is stored
// anonymized and acted on by no one (they stay suppressed); a second run is harmless
// and recorded; a refused request changes nothing.
func TestForgetErasesEverywhereAndKeepsSuppressing(t *testing.T) {
	t.Parallel()
	p := startPipeline(t)
	p.start(stream.Classifier, classifier.Run)
	p.start(stream.Stopper, stopper.Run)
	p.start(stream.CRMWriter, crmwriter.Run)
	p.start(stream.Suppressor, suppressor.Run)
	p.start(stream.Projector, projector.Run)
	const ana, phone = "ana.lopez@northwind.example", "(555) 010-4477"
	p.sb.AddInstantlyLead(campaign, ana)
	p.sb.AddInstantlyLead(campaign, "bob.stone@northwind.example")
	at := time.Now().Add(-time.Hour)
	reply := p.post(instantlyEvent("reply_received", "Ana.Lopez@Northwind.example", campaign, "em-ana-1", "Interested! Call me on +1 (555) 010-4477.", at))[0]
	unsub := p.post(instantlyEvent("lead_unsubscribed", ana, campaign, "em-ana-2", "", at.Add(time.Minute)))[0]
	p.completedIn(30*time.Second, reply, stream.Stopper, stream.CRMWriter)
	p.completedIn(30*time.Second, unsub, stream.Suppressor)
	updates := func() int { return len(p.sb.Stops(ana)) + len(p.sb.Raises(ana)) }
	eventually(t, 10*time.Second, "her reply acted on at Instantly", func() bool { return updates() > 0 })
	settled(t, p.conn.JS, stream.Stopper)
	// Bob's reply names her; an operator has paused the stopper, so it waits.
	ctx := context.Background()
	if err := consumer.Pause(ctx, p.conn.JS, stream.Stopper, time.Now().Add(time.Hour)); err != nil {
		t.Fatal(err)
	}
	bob := p.post(instantlyEvent("reply_received", "bob.stone@northwind.example", campaign, "em-bob-1", "Not me: write to ana.lopez@northwind.example, she decides.", at.Add(2*time.Minute)))[0]
	p.completedIn(30*time.Second, bob, stream.CRMWriter)
	// HubSpot says who referred Bob: her address, as a property of his.
	bobID := p.sb.AddContact("bob.stone@northwind.example", nil)
	referral := p.postSigned("hubspot", fmt.Appendf(nil, `[{"eventId":4100000001,"subscriptionId":27,"portalId":62515,"appId":1160452,"occurredAt":%d,`+
		`"subscriptionType":"contact.propertyChange","attemptNumber":0,"objectId":%s,"propertyName":"referred_by",`+
		`"propertyValue":"%s","changeSource":"CRM_UI"}]`, at.Add(3*time.Minute).UnixMilli(), bobID, ana))[0]
	p.completedIn(30*time.Second, referral, stream.CRMWriter)
	// A delivery naming her that the gateway quarantined (keys differing in case).
	p.mu.Lock()
	hook := p.gwURL + "/hooks/instantly/tok-instantly-0123456789"
	p.mu.Unlock()
	postQuarantined(t, hook, `{"event_type":"reply_received","EVENT_TYPE":"lead_unsubscribed","lead_email":"`+ana+`","timestamp":"`+at.Format(time.RFC3339)+`"}`)
	settled(t, p.conn.JS, stream.Projector)
	url := p.conn.Embedded.ClientURL()
	dir := p.conn.Embedded.StoreDir()
	stops := updates()
	if stops == 0 || len(onDisk(t, dir, ana)) == 0 || len(onDisk(t, dir, phone)) == 0 {
		t.Fatalf("before the erasure: %d updates at Instantly, address on disk in %v, phone in %v", stops, onDisk(t, dir, ana), onDisk(t, dir, phone))
	}
	st, err := p.conn.JS.Stream(ctx, stream.Events)
	if err != nil {
		t.Fatal(err)
	}
	lastSeq := func() uint64 {
		info, err := st.Info(ctx)
		if err != nil {
			t.Fatal(err)
		}
		return info.State.LastSeq
	}

	// Refused requests change nothing.
	before := lastSeq()
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{ana, "--tenant", "acme", "--why", ""}, "--why is required"},
		{[]string{ana, "--why", "asked"}, "--tenant is required"},
		{[]string{"not-an-address", "--tenant", "acme", "--why", "asked"}, "neither an e-mail address nor a phone number"},
		{[]string{"ana@", "--tenant", "acme", "--why", "asked"}, "not an e-mail address"},
		{[]string{ana, "--tenant", "Acme Corp", "--why", "asked"}, "not a tenant id"},
	} {
		out, err := exec.Command(exactoBin, append(append([]string{"forget"}, c.args...), "--nats-url", url)...).CombinedOutput()
		if err == nil || !strings.Contains(string(out), c.want) {
			t.Errorf("forget %v: %v, %s; want an error saying %q", c.args, err, out, c.want)
		}
	}
	if runs, err := privacy.Runs(ctx, p.conn.JS, ""); err != nil || len(runs) != 0 || lastSeq() != before || len(onDisk(t, dir, ana)) == 0 {
		t.Fatalf("a refused request changed something: runs %v (%v), last sequence %d → %d", runs, err, before, lastSeq())
	}

	// What Instantly said of her reply holds her words as it keeps them.
	verdicts, err := p.conn.JS.KeyValue(ctx, stream.Confirmations)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := verdicts.Get(ctx, "acme."+reply); err != nil {
		t.Fatalf("no verdict of her reply before the erasure: %v", err)
	}
	out := runExacto(t, "forget", "ANA.LOPEZ@northwind.example", "--tenant", "acme", "--why", "GDPR request #12", "--by", "dpo", "--nats-url", url)
	t.Log(out)
	settled(t, p.conn.JS, stream.Projector)
	if found := onDisk(t, dir, ana); len(found) > 0 {
		t.Errorf("the forgotten address is still on disk in %v", found)
	}
	if found := onDisk(t, dir, phone); len(found) > 0 {
		t.Errorf("the forgotten phone number is still on disk in %v", found)
	}
	// That verdict held her words (her phone number written her own way, which no key
	// of hers names): it is gone, on disk or in memory alike.
	if e, err := verdicts.Get(ctx, "acme."+reply); err == nil {
		t.Errorf("the verdict of her reply is kept: %s", e.Value())
	}
	// The operator's pause stays; once resumed, the stopper acts on Bob's reply (his,
	// rewritten, not hers).
	if c, err := p.conn.JS.Consumer(ctx, stream.Events, stream.Stopper); err != nil || !c.CachedInfo().Paused {
		t.Errorf("the stopper the operator paused was resumed by the erasure (%v)", err)
	}
	if err := consumer.Resume(ctx, p.conn.JS, stream.Stopper); err != nil {
		t.Fatal(err)
	}
	p.completedIn(30*time.Second, bob, stream.Stopper)
	if len(p.sb.Stops("bob.stone@northwind.example"))+len(p.sb.Raises("bob.stone@northwind.example")) == 0 {
		t.Error("Bob's reply, which named her, was never acted on")
	}
	// Bob's reply is kept, her address in it replaced; it is still his, acted on.
	bobEnv := storedEnvelope(t, p, bob)
	if bobEnv.Data.Contact.Email != "bob.stone@northwind.example" || !strings.Contains(bobEnv.Data.Message.Text, "write to [erased], she decides") || bobEnv.Rewritten() {
		t.Errorf("bob's reply after the erasure: %+v %+v", bobEnv.Data.Contact, bobEnv.Data.Message)
	}
	// Hers is about an anonymous contact, its counts kept.
	herEnv := storedEnvelope(t, p, reply)
	anon := herEnv.Data.Contact.Anonymous
	if !strings.HasPrefix(anon, "an_") || herEnv.Erasure != anon || herEnv.Data.Message.Text != "" || string(herEnv.Data.Raw) != string(privacy.Erased) {
		t.Fatalf("her reply after the erasure: %+v", herEnv)
	}
	live, err := projection.Open(ctx, p.conn.JS, "", 1)
	if err != nil {
		t.Fatal(err)
	}
	r := projection.Reader{Stores: live}
	c, ok, err := r.ContactByKey(ctx, "acme", "anonymous", anon)
	if err != nil || !ok || !c.Replied() || c.View().Status != "unsubscribed" {
		t.Errorf("her anonymous record: %+v %v %v", c, ok, err)
	}
	if _, ok, _ := r.ContactByEmail(ctx, "acme", ana); ok {
		t.Error("her record is still found by her address")
	}
	for _, name := range projection.Names {
		if out := runExacto(t, "replay", "--projection", name, "--nats-url", url); !strings.Contains(out, "equal to the live projection") {
			t.Errorf("replay of %s after the erasure:\n%s", name, out)
		}
	}
	file := filepath.Join(t.TempDir(), "contacts.db")
	runExacto(t, "replay", "--projection", "contacts", "--into", "sqlite:"+file, "--nats-url", url)
	if found := onDisk(t, filepath.Dir(file), ana); len(found) > 0 {
		t.Errorf("the SQLite export made after holds the address: %v", found)
	}

	// A reconciliation finds her at Instantly, unsubscribed, and leaves her alone:
	// no finding, no repair naming her.
	for _, f := range p.reconcilePass(false).Findings {
		if strings.Contains(strings.ToLower(f.Contact+f.Where+f.Found), "ana.lopez") {
			t.Errorf("a reconciliation finding about her: %+v", f)
		}
	}
	settled(t, p.conn.JS, stream.Projector)
	if found := onDisk(t, dir, ana); len(found) > 0 {
		t.Errorf("a reconciliation put the address on disk again: %v", found)
	}

	// She stays suppressed: her next reply is stored anonymized, and nobody acts on it.
	again := p.post(instantlyEvent("reply_received", ana, campaign, "em-ana-3", "Please call me back", time.Now()))[0]
	p.completedIn(30*time.Second, again, stream.Classifier, stream.Stopper, stream.CRMWriter, stream.Projector)
	if env := storedEnvelope(t, p, again); env.Data.Contact.Anonymous != anon || env.Data.Contact.Email != "" {
		t.Errorf("her later reply was stored as %+v", env.Data.Contact)
	}
	if n := updates(); n != stops {
		t.Errorf("her later reply was acted on: %d updates at Instantly, %d before", n, stops)
	}
	if d := p.derived(envelope.TypeReplyClassified, again); len(d) != 0 {
		t.Errorf("her later reply was classified: %v", d)
	}
	if notes := p.notesFor(again); len(notes) != 0 {
		t.Errorf("her later reply was written to the CRM: %v", notes)
	}
	// HubSpot names her by an id Exacto never linked to her: the CRM writer asks
	// HubSpot who that is, and its answer about her is stored anonymized.
	newID := p.sb.AddContact(ana, nil)
	byID := p.postSigned("hubspot", fmt.Appendf(nil, `[{"eventId":4100000002,"subscriptionId":27,"portalId":62515,"appId":1160452,"occurredAt":%d,`+
		`"subscriptionType":"contact.propertyChange","attemptNumber":0,"objectId":%s,"propertyName":"lifecyclestage",`+
		`"propertyValue":"lead","changeSource":"CRM_UI"}]`, time.Now().UnixMilli(), newID))[0]
	p.completedIn(30*time.Second, byID, stream.CRMWriter)
	settled(t, p.conn.JS, stream.Projector)
	if found := onDisk(t, dir, ana); len(found) > 0 {
		t.Errorf("her later events put the address on disk again: %v", found)
	}

	// A second run finds nothing left and is recorded too; the consumers an earlier
	// run left paused (it failed) are this one's to resume.
	if err := consumer.Pause(ctx, p.conn.JS, stream.Projector, time.Now().Add(24*time.Hour)); err != nil {
		t.Fatal(err)
	}
	if err := privacy.SetPaused(ctx, p.conn.JS, []string{stream.Projector}); err != nil {
		t.Fatal(err)
	}
	out = runExacto(t, "forget", ana, "--tenant", "acme", "--why", "GDPR request #12, checked", "--by", "dpo", "--nats-url", url)
	if !strings.Contains(out, "forgotten as "+anon+": 0 events rewritten") {
		t.Errorf("a second run:\n%s", out)
	}
	if c, err := p.conn.JS.Consumer(ctx, stream.Events, stream.Projector); err != nil || c.CachedInfo().Paused {
		t.Errorf("the projector a failed run left paused is still paused (%v)", err)
	}
	runs, err := privacy.Runs(ctx, p.conn.JS, "acme")
	if err != nil || len(runs) != 2 || runs[0].By != "dpo" || runs[0].Why != "GDPR request #12" || runs[0].About < 2 || runs[0].Again || !runs[1].Again || runs[1].Events != 0 {
		t.Errorf("erasure records: %+v (%v)", runs, err)
	}
	data, _ := json.Marshal(runs)
	if bytes.Contains(bytes.ToLower(data), []byte(ana)) {
		t.Errorf("the erasure record names her: %s", data)
	}
}

// postQuarantined posts body to url, which must quarantine it, and returns its
// quarantine id.
func postQuarantined(t *testing.T, url, body string) string {
	t.Helper()
	resp, err := http.Post(url, "application/json", strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var answer struct {
		Quarantined int    `json:"quarantined"`
		ID          string `json:"quarantine_id"`
	}
	data, _ := io.ReadAll(resp.Body)
	if err := json.Unmarshal(data, &answer); err != nil || resp.StatusCode != 200 || answer.Quarantined != 1 || answer.ID == "" {
		t.Fatalf("the delivery was not quarantined: %d %s", resp.StatusCode, data)
	}
	return answer.ID
}

// storedEnvelope reads event id from the stream, through the index of stored ids.
func storedEnvelope(t *testing.T, p *pipeline, id string) envelope.Envelope {
	t.Helper()
	env, found, err := stream.Load(context.Background(), p.conn.JS, id)
	if err != nil || !found {
		t.Fatalf("event %s: found %v, %v", id, found, err)
	}
	return env
}
