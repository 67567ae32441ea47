package hubspot

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"errors"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"exacto.dev/pkg/envelope"
	"exacto.dev/pkg/providers"
	"exacto.dev/pkg/providers/providertest"
)

const (
	secret      = "5f1d3c2b-8a47-4e6f-9b0c-1d2e3f4a5b6c"
	otherSecret = "a9b8c7d6-e5f4-4a3b-8c2d-1e0f9a8b7c6d"
	hookURL     = "https://hooks.example.com/hooks/ep/tok"
	// docSecret is the client secret of HubSpot's documented examples.
	docSecret = "yyyyyyyy-yyyy-yyyy-yyyy-yyyyyyyyyyyy"
	docURL    = "https://www.example.com/webhook_uri"
)

func TestConformance(t *testing.T) {
	providertest.Run(t, providertest.Suite{Spec: Spec, Secret: secret, OtherSecret: otherSecret, URL: hookURL})
}

func newProvider(t testing.TB, cfg providers.Config) providers.Provider {
	t.Helper()
	p, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

func fixture(t *testing.T, name string) []byte {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("testdata", name))
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func request(method, url string, body []byte, h http.Header, now time.Time) *providers.Request {
	return &providers.Request{Method: method, URL: url, Header: h, Body: body, Now: now}
}

func headers(kv ...string) http.Header {
	h := http.Header{}
	for i := 0; i+1 < len(kv); i += 2 {
		h.Set(kv[i], kv[i+1])
	}
	return h
}

// The vectors of HubSpot's "Validating requests" page (v1 with a body, v2 GET) and of
// its official SDKs' signature tests: hubspot-api-nodejs test/unit/signature.spec.ts
// (v2 with a body) and hubspot-api-python tests/spec/utils/test_signature.py (v1, v2 and
// v3 over the body {'example_field':'example_value'}, timestamp 15000000).
func TestDocumentedSignatures(t *testing.T) {
	p := newProvider(t, providers.Config{Secrets: []string{otherSecret, docSecret}, SignatureVersions: Versions})
	sdkBody := []byte(`{'example_field':'example_value'}`)
	sdkTime := time.UnixMilli(15000000).Add(time.Minute)
	tests := []struct {
		name, method, url string
		body              []byte
		h                 http.Header
		now               time.Time
	}{
		{"docs v1", http.MethodPost, docURL, fixture(t, "validating_requests_v1.json"), headers(HeaderVersion, "v1",
			HeaderLegacy, "232db2615f3d666fe21a8ec971ac7b5402d33b9a925784df3ca654d05f4817de"), providertest.Now},
		{"docs v2 GET", http.MethodGet, docURL, nil, headers(HeaderVersion, "v2",
			HeaderLegacy, "eee2dddcc73c94d699f5e395f4b9d454a069a6855fbfa152e91e88823087200e"), providertest.Now},
		{"nodejs v2 POST", http.MethodPost, docURL, []byte(`{"example_field":"example_value"}`), headers(HeaderVersion, "v2",
			HeaderLegacy, "9569219f8ba981ffa6f6f16aa0f48637d35d728c7e4d93d0d52efaa512af7900"), providertest.Now},
		{"python v1", http.MethodPost, docURL, sdkBody, headers(HeaderVersion, "v1",
			HeaderLegacy, "69fc6631a867edd4f9e9e627fc5c1148e3fbdd8b21837b6d2b8901c1fa57f750"), providertest.Now},
		{"python v2", http.MethodPost, docURL, sdkBody, headers(HeaderVersion, "v2",
			HeaderLegacy, "4fe4e3a7d3cf09db53be39d0a58130e2aaba074ec123a9e355b876a689a1c383"), providertest.Now},
		{"python v3", http.MethodPost, docURL, sdkBody, headers(HeaderV3, "HPW73RUtKmcYoEDADG0s6MmGFWUzWJKAW07r8RDgcQw=",
			HeaderTimestamp, "15000000"), sdkTime},
		{"upper-case hex", http.MethodPost, docURL, fixture(t, "validating_requests_v1.json"), headers(HeaderVersion, "V1",
			HeaderLegacy, "232DB2615F3D666FE21A8EC971AC7B5402D33B9A925784DF3CA654D05F4817DE"), providertest.Now},
	}
	for _, tt := range tests {
		if err := p.Verify(request(tt.method, tt.url, tt.body, tt.h, tt.now)); err != nil {
			t.Errorf("%s: %v", tt.name, err)
		}
	}
	// Sign reproduces the SDK's v3 vector.
	h, _, _ := Sign(http.MethodPost, docURL, sdkBody, docSecret, time.UnixMilli(15000000))
	if got := h.Get(HeaderV3); got != "HPW73RUtKmcYoEDADG0s6MmGFWUzWJKAW07r8RDgcQw=" {
		t.Errorf("Sign v3 = %s", got)
	}
	if got := h.Get(HeaderLegacy); got != "69fc6631a867edd4f9e9e627fc5c1148e3fbdd8b21837b6d2b8901c1fa57f750" {
		t.Errorf("Sign v1 = %s", got)
	}
}

// The v3 URI decodes exactly the characters HubSpot lists, and nothing else.
func TestSignedURI(t *testing.T) {
	for in, out := range map[string]string{
		docURL: docURL,
		"https://hooks.example.com/h/ep/tok?a=b%3Ac%2Fd%3Fe%40f%21g%24h%27i%28j%29k%2Al%2Cm%3Bn": "https://hooks.example.com/h/ep/tok?a=b:c/d?e@f!g$h'i(j)k*l,m;n",
		"https://hooks.example.com/h?q=a%20b%26c%3Dd%25e%2B":                                     "https://hooks.example.com/h?q=a%20b%26c%3Dd%25e%2B",
		"https://hooks.example.com/h?q=%253A":                                                    "https://hooks.example.com/h?q=%253A",
		"https://hooks.example.com/h?q=%3a":                                                      "https://hooks.example.com/h?q=%3a",
	} {
		if got := SignedURI(in); got != out {
			t.Errorf("SignedURI(%s) = %s, want %s", in, got, out)
		}
	}
	// HubSpot signs the decoded form, so a delivery to an encoded URL verifies.
	url := "https://hooks.example.com/hooks/ep/tok?from=crm%3Acontacts"
	body := []byte(`[]`)
	ts := strconv.FormatInt(providertest.Now.UnixMilli(), 10)
	sig := base64.StdEncoding.EncodeToString(v3([]byte(secret), "POST", "https://hooks.example.com/hooks/ep/tok?from=crm:contacts", body, ts))
	r := request(http.MethodPost, url, body, headers(HeaderV3, sig, HeaderTimestamp, ts), providertest.Now)
	if err := newProvider(t, providers.Config{Secrets: []string{secret}}).Verify(r); err != nil {
		t.Fatal(err)
	}
}

func TestVerifyRejections(t *testing.T) {
	body, _ := Sample("batch", providertest.Now)
	good, _, _ := Sign(http.MethodPost, hookURL, body, secret, providertest.Now)
	with := func(kv ...string) http.Header {
		h := good.Clone()
		for i := 0; i+1 < len(kv); i += 2 {
			if kv[i+1] == "" {
				h.Del(kv[i])
			} else {
				h.Set(kv[i], kv[i+1])
			}
		}
		return h
	}
	legacyOnly := with(HeaderV3, "", HeaderTimestamp, "")
	p := newProvider(t, providers.Config{Secrets: []string{secret}, SignatureVersions: Versions})
	tests := []struct {
		name   string
		h      http.Header
		method string
		url    string
		now    time.Time
		want   error
	}{
		{"valid", good, "POST", hookURL, providertest.Now, nil},
		{"no signature", with(HeaderV3, "", HeaderLegacy, ""), "POST", hookURL, providertest.Now, providers.ErrMissingSignature},
		{"v3 without timestamp", with(HeaderTimestamp, ""), "POST", hookURL, providertest.Now, providers.ErrTimestamp},
		{"v3 timestamp in seconds", with(HeaderTimestamp, "17636"), "POST", hookURL, providertest.Now, providers.ErrBadSignature},
		{"v3 timestamp not a number", with(HeaderTimestamp, "2026-11-20T10:30:00Z"), "POST", hookURL, providertest.Now, providers.ErrTimestamp},
		{"v3 not base64", with(HeaderV3, "%%%"), "POST", hookURL, providertest.Now, providers.ErrBadSignature},
		{"v3 hex instead of base64", with(HeaderV3, strings.Repeat("ab", 32)), "POST", hookURL, providertest.Now, providers.ErrBadSignature},
		{"v3 other method", good, "PUT", hookURL, providertest.Now, providers.ErrBadSignature},
		{"v3 other URL", good, "POST", hookURL + "?x=1", providertest.Now, providers.ErrBadSignature},
		{"v3 6 minutes old", good, "POST", hookURL, providertest.Now.Add(6 * time.Minute), providers.ErrTimestamp},
		{"v3 6 minutes ahead", good, "POST", hookURL, providertest.Now.Add(-6 * time.Minute), providers.ErrTimestamp},
		{"v3 4 minutes old", good, "POST", hookURL, providertest.Now.Add(4 * time.Minute), nil},
		// A failed v3 never falls back to the v1 signature beside it.
		{"bad v3 with good v1", with(HeaderV3, base64.StdEncoding.EncodeToString(make([]byte, 32))), "POST", hookURL, providertest.Now, providers.ErrBadSignature},
		{"v1 alone", legacyOnly, "POST", hookURL, providertest.Now.Add(48 * time.Hour), nil},
		{"v1 without version header", with(HeaderV3, "", HeaderVersion, ""), "POST", hookURL, providertest.Now, nil},
		{"v1 checked as v2", with(HeaderV3, "", HeaderVersion, "v2"), "POST", hookURL, providertest.Now, providers.ErrBadSignature},
		{"unknown version", with(HeaderV3, "", HeaderVersion, "v9"), "POST", hookURL, providertest.Now, providers.ErrBadSignature},
		{"v1 not hex", with(HeaderV3, "", HeaderLegacy, "sha256=abc"), "POST", hookURL, providertest.Now, providers.ErrBadSignature},
		{"v1 truncated", with(HeaderV3, "", HeaderLegacy, good.Get(HeaderLegacy)[:62]), "POST", hookURL, providertest.Now, providers.ErrBadSignature},
	}
	for _, tt := range tests {
		err := p.Verify(request(tt.method, tt.url, body, tt.h, tt.now))
		if !errors.Is(err, tt.want) || (tt.want == nil) != (err == nil) {
			t.Errorf("%s: got %v, want %v", tt.name, err, tt.want)
		}
	}
	// By default an endpoint takes v3 alone: a captured delivery stripped of its v3
	// headers (its v1 signs no time) is refused however old, and so is a v2 one.
	v3 := newProvider(t, providers.Config{Secrets: []string{secret}})
	for _, tt := range []struct {
		name string
		h    http.Header
		age  time.Duration
		want error
	}{
		{"v3", good, 0, nil},
		{"v3 stripped, 400 s old", legacyOnly, 400 * time.Second, providers.ErrMissingSignature},
		{"v3 stripped, at once", legacyOnly, 0, providers.ErrMissingSignature},
		{"v3 stripped, v2", with(HeaderV3, "", HeaderTimestamp, "", HeaderVersion, "v2"), 0, providers.ErrMissingSignature},
	} {
		if err := v3.Verify(request("POST", hookURL, body, tt.h, providertest.Now.Add(tt.age))); !errors.Is(err, tt.want) || (tt.want == nil) != (err == nil) {
			t.Errorf("default versions, %s: got %v, want %v", tt.name, err, tt.want)
		}
	}
	// An endpoint that names v1 alone checks the v1 signature, v3 or not beside it,
	// and refuses a v2 one.
	v1 := newProvider(t, providers.Config{Secrets: []string{secret}, SignatureVersions: []string{"v1"}})
	for _, tt := range []struct {
		name string
		h    http.Header
		want error
	}{
		{"v1 beside v3", good, nil},
		{"v1 alone", legacyOnly, nil},
		{"v2", with(HeaderV3, "", HeaderVersion, "v2"), providers.ErrBadSignature},
	} {
		if err := v1.Verify(request("POST", hookURL, body, tt.h, providertest.Now)); !errors.Is(err, tt.want) || (tt.want == nil) != (err == nil) {
			t.Errorf("versions [v1], %s: got %v, want %v", tt.name, err, tt.want)
		}
	}
	if _, err := New(providers.Config{Secrets: []string{secret}, SignatureVersions: []string{"v3", "v4"}}); err == nil || !strings.Contains(err.Error(), `unknown "v4"`) {
		t.Errorf("signature_versions [v3 v4]: %v, want an error naming v4", err)
	}
	// Config.Tolerance widens (or narrows) the window.
	wide := newProvider(t, providers.Config{Secrets: []string{secret}, Tolerance: 10 * time.Minute})
	if err := wide.Verify(request("POST", hookURL, body, good, providertest.Now.Add(8*time.Minute))); err != nil {
		t.Errorf("tolerance 10m, 8 minutes old: %v", err)
	}
	narrow := newProvider(t, providers.Config{Secrets: []string{secret}, Tolerance: time.Minute})
	if err := narrow.Verify(request("POST", hookURL, body, good, providertest.Now.Add(2*time.Minute))); !errors.Is(err, providers.ErrTimestamp) {
		t.Errorf("tolerance 1m, 2 minutes old: %v", err)
	}
}

func events(t *testing.T, body []byte) []providers.Event {
	t.Helper()
	evs, err := newProvider(t, providers.Config{Secrets: []string{secret}}).Events(request("POST", hookURL, body, http.Header{}, providertest.Now))
	if err != nil {
		t.Fatal(err)
	}
	providertest.CheckEvents(t, Spec, evs)
	for _, ev := range evs {
		if !bytes.Contains(body, ev.Data.Raw) || !json.Valid(ev.Data.Raw) {
			t.Fatalf("raw is not the element as sent: %s", ev.Data.Raw)
		}
	}
	return evs
}

// The fixtures are HubSpot's documented payloads: the v1 example of "Validating
// requests", the batch of the webhooks API guide (which names the type eventType) and
// the sensitive-data page's example.
func TestGolden(t *testing.T) {
	type want struct {
		typ, key, id, subject, version, status string
		prop                                   *envelope.Property
		time                                   time.Time
	}
	tests := map[string][]want{
		"validating_requests_v1.json": {{envelope.TypeContactUpdated, envelope.Key("62515", "12345", "1", "123", "1564113600000"),
			"1", "contact/123", "1564113600000", "", nil, time.UnixMilli(1564113600000)}},
		"webhooks_guide.json": {
			{envelope.TypeLeadStatusChanged, envelope.Key("33", "25", "3816279340", "1246965", "1462216307945"), "3816279340",
				"contact/1246965", "1462216307945", "subscriber", &envelope.Property{Name: "lifecyclestage", Value: "subscriber"}, time.UnixMilli(1462216307945)},
			{envelope.TypeContactUpdated, envelope.Key("33", "22", "3816279480", "1246978", "1462216307945"), "3816279480",
				"contact/1246978", "1462216307945", "", nil, time.UnixMilli(1462216307945)},
		},
		// Not a HubSpot example: an opt-out as assumed (docs/platforms.md), in both formats.
		"email_optout.json": {
			{envelope.TypeLeadUnsubscribed, envelope.Key("62515", "28", "4109823311", "1246965", "1764000000000"), "4109823311",
				"contact/1246965", "1764000000000", "", &envelope.Property{Name: "hs_email_optout", Value: "true"}, time.UnixMilli(1764000000000)},
			{envelope.TypeContactUpdated, envelope.Key("62515", "29", "4109823312", "1246978", "1764000060000"), "4109823312",
				"contact/1246978", "1764000060000", "", &envelope.Property{Name: "hs_email_optout", Value: "false"}, time.UnixMilli(1764000060000)},
		},
		"sensitive_data.json": {{envelope.TypeContactUpdated, envelope.Key("891472211", "686627", "3029365631", "847297356", "1715203101896"),
			"3029365631", "contact/847297356", "1715203101896", "", &envelope.Property{Name: "passport_number", Value: "REDACTED"}, time.UnixMilli(1715203101896)}},
	}
	for name, wants := range tests {
		t.Run(name, func(t *testing.T) {
			evs := events(t, fixture(t, name))
			if len(evs) != len(wants) {
				t.Fatalf("%d events, want %d", len(evs), len(wants))
			}
			for i, w := range wants {
				ev := evs[i]
				if ev.Type != w.typ || ev.Key != w.key || ev.ProviderEventID != w.id || ev.Subject != w.subject ||
					ev.Version != w.version || ev.Data.Status != w.status || !ev.Time.Equal(w.time) ||
					(w.prop == nil) != (ev.Data.Property == nil) || (w.prop != nil && *w.prop != *ev.Data.Property) {
					t.Errorf("event %d: got %+v", i, ev)
				}
				if ev.Data.Contact == nil || ev.Data.Contact.ExternalID != strings.TrimPrefix(w.subject, "contact/") {
					t.Errorf("event %d: contact %+v", i, ev.Data.Contact)
				}
			}
		})
	}
	// The v1 example verifies with the documented secret, and its element is stored whole.
	body := fixture(t, "validating_requests_v1.json")
	if evs := events(t, body); !bytes.Equal(evs[0].Data.Raw, body[1:len(body)-1]) {
		t.Errorf("raw %s", evs[0].Data.Raw)
	}
}

func TestMapping(t *testing.T) {
	tests := []struct {
		element, typ, subject, status string
	}{
		{`"subscriptionType":"contact.propertyChange","objectId":7,"propertyName":"hs_lead_status","propertyValue":"OPEN_DEAL"`, envelope.TypeLeadStatusChanged, "contact/7", "OPEN_DEAL"},
		{`"subscriptionType":"contact.propertyChange","objectId":7,"propertyName":"firstname","propertyValue":"Dana"`, envelope.TypeContactUpdated, "contact/7", ""},
		{`"subscriptionType":"contact.creation","objectId":7,"changeFlag":"NEW"`, envelope.TypeContactUpdated, "contact/7", ""},
		{`"subscriptionType":"contact.deletion","objectId":7`, envelope.TypeUnmapped, "contact/7", ""},
		{`"subscriptionType":"contact.privacyDeletion","objectId":7`, envelope.TypeUnmapped, "contact/7", ""},
		{`"subscriptionType":"deal.creation","objectId":9`, envelope.TypeOpportunityCreated, "deal/9", ""},
		{`"subscriptionType":"deal.propertyChange","objectId":9,"propertyName":"dealstage","propertyValue":"closedwon"`, envelope.TypeUnmapped, "deal/9", ""},
		{`"subscriptionType":"company.creation","objectId":3`, envelope.TypeUnmapped, "company/3", ""},
		{`"subscriptionType":"object.propertyChange","objectTypeId":"0-1","objectId":7,"propertyName":"lifecyclestage","propertyValue":"customer","isSensitive":false`, envelope.TypeLeadStatusChanged, "contact/7", "customer"},
		{`"subscriptionType":"object.creation","objectTypeId":"0-3","objectId":9`, envelope.TypeOpportunityCreated, "deal/9", ""},
		{`"subscriptionType":"object.creation","objectTypeId":"2-4711","objectId":5`, envelope.TypeUnmapped, "2-4711/5", ""},
		{`"eventType":"contact.propertyChange","objectId":"7","propertyName":"email","propertyValue":"dana@globex.example"`, envelope.TypeContactUpdated, "contact/7", ""},
		// A full e-mail opt-out sets hs_email_optout; clearing it is an update, never a resubscribe.
		{`"subscriptionType":"contact.propertyChange","objectId":7,"propertyName":"hs_email_optout","propertyValue":"true"`, envelope.TypeLeadUnsubscribed, "contact/7", ""},
		{`"subscriptionType":"contact.propertyChange","objectId":7,"propertyName":"hs_email_optout","propertyValue":"TRUE"`, envelope.TypeLeadUnsubscribed, "contact/7", ""},
		{`"subscriptionType":"object.propertyChange","objectTypeId":"0-1","objectId":7,"propertyName":"hs_email_optout","propertyValue":"true"`, envelope.TypeLeadUnsubscribed, "contact/7", ""},
		{`"subscriptionType":"contact.propertyChange","objectId":7,"propertyName":"hs_email_optout","propertyValue":"false"`, envelope.TypeContactUpdated, "contact/7", ""},
		{`"subscriptionType":"contact.propertyChange","objectId":7,"propertyName":"hs_email_optout","propertyValue":""`, envelope.TypeContactUpdated, "contact/7", ""},
		{`"subscriptionType":"object.propertyChange","objectTypeId":"0-2","objectId":7,"propertyName":"hs_email_optout","propertyValue":"true"`, envelope.TypeUnmapped, "company/7", ""},
	}
	for _, tt := range tests {
		body := []byte(`[{"eventId":100,"subscriptionId":2,"portalId":62515,"appId":3,"occurredAt":1764000000000,"attemptNumber":0,` + tt.element + `}]`)
		ev := events(t, body)[0]
		if ev.Type != tt.typ || ev.Subject != tt.subject || ev.Data.Status != tt.status {
			t.Errorf("%s: got %s %q %q", tt.element, ev.Type, ev.Subject, ev.Data.Status)
		}
		if ev.Type == envelope.TypeOpportunityCreated && ev.Data.Opportunity.ID != "9" {
			t.Errorf("%s: opportunity %+v", tt.element, ev.Data.Opportunity)
		}
		if strings.Contains(tt.element, `"email"`) && ev.Data.Contact.Email != "dana@globex.example" {
			t.Errorf("email change: contact %+v", ev.Data.Contact)
		}
	}
}

// A retry changes attemptNumber only: the identity stays; a repeat within a batch is
// one event.
func TestRetryIdentity(t *testing.T) {
	first := `{"eventId":3816279340,"subscriptionId":25,"portalId":33,"appId":1160452,"occurredAt":1462216307945,"subscriptionType":"contact.propertyChange","attemptNumber":0,"objectId":1246965,"propertyName":"lifecyclestage","propertyValue":"subscriber"}`
	retry := strings.Replace(first, `"attemptNumber":0`, `"attemptNumber":3`, 1)
	a, b := events(t, []byte("["+first+"]")), events(t, []byte("["+retry+"]"))
	if a[0].Key != b[0].Key {
		t.Fatalf("retry changed the key: %q, %q", a[0].Key, b[0].Key)
	}
	if evs := events(t, []byte("["+first+","+retry+"]")); len(evs) != 1 {
		t.Fatalf("%d events from one notification listed twice", len(evs))
	}
	other := strings.Replace(first, `"portalId":33`, `"portalId":34`, 1)
	if evs := events(t, []byte("["+first+","+other+"]")); len(evs) != 2 {
		t.Fatal("one eventId in two accounts is two events")
	}
}

func TestMalformed(t *testing.T) {
	for _, body := range []string{
		`[]`,
		`{}`,
		`{"eventId":1}`,
		`[1]`,
		`[null]`,
		`[{"subscriptionId":1,"occurredAt":1564113600000,"subscriptionType":"contact.creation"}]`,
		`[{"eventId":1,"occurredAt":1564113600000}]`,
		`[{"eventId":1,"subscriptionType":"contact.creation"}]`,
		`[{"eventId":1,"occurredAt":"yesterday","subscriptionType":"contact.creation"}]`,
		`[{"eventId":1,"occurredAt":1.5e12,"subscriptionType":"contact.creation"}]`,
		`[{"eventId":1,"occurredAt":99999999999999999,"subscriptionType":"contact.creation"}]`,
		`[{"eventId":{},"occurredAt":1564113600000,"subscriptionType":"contact.creation"}]`,
		`[{"eventId":1,"occurredAt":1564113600000,"subscriptionType":"contact.creation","eventId":2}]`,
	} {
		_, err := newProvider(t, providers.Config{Secrets: []string{secret}}).Events(request("POST", hookURL, []byte(body), http.Header{}, providertest.Now))
		if !errors.Is(err, providers.ErrMalformed) {
			t.Errorf("Events(%s): got %v, want ErrMalformed", body, err)
		}
	}
}

func TestNew(t *testing.T) {
	for _, cfg := range []providers.Config{
		{},
		{Secrets: []string{secret, ""}},
		{Secrets: []string{secret}, SecretHeader: "X-Secret"},
	} {
		if _, err := New(cfg); err == nil {
			t.Errorf("New(%+v) accepted", cfg)
		}
	}
}

func TestSample(t *testing.T) {
	// Determinism of every sample is checked by the conformance suite.
	evs := events(t, mustSample(t, "batch"))
	got := []string{}
	for _, ev := range evs {
		got = append(got, ev.Type)
	}
	want := []string{envelope.TypeContactUpdated, envelope.TypeContactUpdated, envelope.TypeLeadStatusChanged, envelope.TypeOpportunityCreated}
	if strings.Join(got, ",") != strings.Join(want, ",") {
		t.Errorf("batch types %v, want %v", got, want)
	}
	if _, err := Sample("nope", providertest.Now); err == nil {
		t.Error("unknown sample event accepted")
	}
}

func mustSample(t *testing.T, event string) []byte {
	t.Helper()
	b, err := Sample(event, providertest.Now)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func FuzzVerify(f *testing.F) {
	for _, e := range sampleEvents {
		body, _ := Sample(e, providertest.Now)
		h, _, _ := Sign(http.MethodPost, hookURL, body, secret, providertest.Now)
		f.Add(body, h.Get(HeaderV3), h.Get(HeaderTimestamp), h.Get(HeaderLegacy), "v1", hookURL)
	}
	f.Add([]byte{}, "", "", "232db2615f3d666fe21a8ec971ac7b5402d33b9a925784df3ca654d05f4817de", "v2", "https://x/%3A%zz")
	p := newProvider(f, providers.Config{Secrets: []string{secret}})
	f.Fuzz(func(t *testing.T, body []byte, sig3, ts, sig, version, url string) {
		h := headers(HeaderV3, sig3, HeaderTimestamp, ts, HeaderLegacy, sig, HeaderVersion, version)
		err := p.Verify(request(http.MethodPost, url, body, h, providertest.Now))
		if err != nil && !errors.Is(err, providers.ErrMissingSignature) && !errors.Is(err, providers.ErrBadSignature) &&
			!errors.Is(err, providers.ErrTimestamp) {
			t.Fatalf("Verify: unexpected error class: %v", err)
		}
	})
}

func FuzzEvents(f *testing.F) {
	names, _ := filepath.Glob("testdata/*.json")
	for _, n := range names {
		b, _ := os.ReadFile(n)
		f.Add(b)
	}
	for _, e := range sampleEvents {
		b, _ := Sample(e, providertest.Now)
		f.Add(b)
	}
	f.Add([]byte(`[{"eventId":true,"occurredAt":"1","subscriptionType":"object.x","objectTypeId":"0-1"}]`))
	p := newProvider(f, providers.Config{Secrets: []string{secret}})
	f.Fuzz(func(t *testing.T, body []byte) {
		evs, err := p.Events(request(http.MethodPost, hookURL, body, http.Header{}, providertest.Now))
		if err != nil {
			if !errors.Is(err, providers.ErrMalformed) {
				t.Fatalf("error not ErrMalformed: %v", err)
			}
			return
		}
		if len(evs) == 0 {
			t.Fatal("no events and no error")
		}
		for _, ev := range evs {
			if ev.Key == "" || ev.Time.IsZero() || ev.Time.Year() > 9999 || !bytes.Contains(body, ev.Data.Raw) {
				t.Fatalf("bad event %+v", ev)
			}
		}
		if err == nil {
			providertest.CheckFuzzed(t, Spec, evs)
		}
	})
}
