package sandbox_test

import (
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"exacto.dev/pkg/platform/sandbox"
)

func get(t *testing.T, sb *sandbox.Server, path string) *http.Response {
	t.Helper()
	resp, err := tryGet(sb, path)
	if err != nil {
		t.Fatal(err)
	}
	return resp
}

// tryGet is safe to call from goroutines other than the test's.
func tryGet(sb *sandbox.Server, path string) (*http.Response, error) {
	req, _ := http.NewRequest(http.MethodGet, sb.URL+path, nil)
	req.Header.Set("Authorization", "Bearer "+sandbox.HubSpotToken)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return nil, err
	}
	resp.Body.Close()
	return resp, nil
}

func TestLoopbackOnly(t *testing.T) {
	sb := sandbox.Start(t)
	if !strings.HasPrefix(sb.URL, "http://127.0.0.1:") {
		t.Fatalf("URL = %s", sb.URL)
	}
}

func TestFaultCountThenClears(t *testing.T) {
	sb := sandbox.Start(t)
	id := sb.AddContact("a@example.com", nil)
	sb.SetFault(sandbox.RouteHubSpotContactGet, sandbox.Fault{Status: 503, RetryAfter: 2 * time.Second, Count: 2})
	var codes []int
	var after string
	for range 3 {
		resp := get(t, sb, "/crm/v3/objects/contacts/"+id)
		codes = append(codes, resp.StatusCode)
		if after == "" {
			after = resp.Header.Get("Retry-After")
		}
	}
	if codes[0] != 503 || codes[1] != 503 || codes[2] != 200 || after != "2" {
		t.Fatalf("codes = %v, Retry-After %q", codes, after)
	}
	if n := sb.Requests(sandbox.RouteHubSpotContactGet); n != 3 {
		t.Errorf("requests = %d", n)
	}
}

func TestAuthRequired(t *testing.T) {
	sb := sandbox.Start(t)
	resp, err := http.Get(sb.URL + "/crm/v3/objects/contacts/1") // no token
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusUnauthorized {
		t.Fatalf("status = %d", resp.StatusCode)
	}
}

func TestConcurrentUse(t *testing.T) {
	sb := sandbox.Start(t)
	id := sb.AddContact("a@example.com", nil)
	var wg sync.WaitGroup
	for i := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range 10 {
				if i%2 == 0 {
					sb.SetFault(sandbox.RouteHubSpotContactGet, sandbox.Fault{Status: 500, Count: 1})
				}
				if _, err := tryGet(sb, "/crm/v3/objects/contacts/"+id); err != nil {
					t.Error(err)
				}
				_ = sb.Contacts()
			}
		}()
	}
	wg.Wait()
	if n := sb.Requests(sandbox.RouteHubSpotContactGet); n != 80 {
		t.Errorf("requests = %d, want 80", n)
	}
}
