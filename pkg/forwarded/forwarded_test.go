package forwarded

import (
	"crypto/tls"
	"net/http"
	"strings"
	"testing"
)

func TestScheme(t *testing.T) {
	trusted, err := Parse([]string{"10.0.0.0/8", "192.168.1.7", "::1/128"})
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		remote, proto string
		tls           bool
		want          string
	}{
		{"10.1.2.3:5000", "https", false, "https"},
		{"10.1.2.3:5000", "HTTPS, http", false, "https"}, // the first hop is the client's
		{"10.1.2.3:5000", "http", false, "http"},
		{"192.168.1.7:80", "https", false, "https"},
		{"[::1]:443", "https", false, "https"},
		{"[::ffff:10.0.0.9]:80", "https", false, "https"},
		{"192.168.1.8:80", "https", false, "http"}, // not a proxy of the config: its word is not taken
		{"203.0.113.5:4000", "https", false, "http"},
		{"203.0.113.5:4000", "", true, "https"},
		{"not an address", "https", false, "http"},
		{"10.1.2.3:5000", "", false, "http"},
	} {
		r := &http.Request{RemoteAddr: c.remote, Header: http.Header{}}
		if c.proto != "" {
			r.Header.Set("X-Forwarded-Proto", c.proto)
		}
		if c.tls {
			r.TLS = &tls.ConnectionState{}
		}
		if got := trusted.Scheme(r); got != c.want {
			t.Errorf("%s, X-Forwarded-Proto %q, TLS %v: %s, want %s", c.remote, c.proto, c.tls, got, c.want)
		}
	}
	for _, bad := range []string{"10.0.0.0/33", "proxy.example", "10.0.0", ""} {
		if _, err := Parse([]string{bad}); err == nil || !strings.Contains(err.Error(), "trusted_proxies") {
			t.Errorf("Parse(%q) = %v, want an error", bad, err)
		}
	}
}
