package forwarded

import (
	"crypto/tls"
	"net"
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

// The client is read from the right of X-Forwarded-For, past the trusted proxies only:
// what a client writes to the left of its proxy's entry changes nothing.
func TestClient(t *testing.T) {
	trusted, err := Parse([]string{"10.0.0.0/8", "::1/128"})
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		remote string
		xff    []string
		want   string
	}{
		{"203.0.113.5:4000", nil, "203.0.113.5"},
		{"203.0.113.5:4000", []string{"198.51.100.1"}, "203.0.113.5"}, // no proxy of the config: its header is not taken
		{"10.1.2.3:5000", nil, "10.1.2.3"},
		{"10.1.2.3:5000", []string{"198.51.100.1"}, "198.51.100.1"},
		{"10.1.2.3:5000", []string{"1.2.3.4, 198.51.100.1"}, "198.51.100.1"},             // 1.2.3.4: the client's own word
		{"10.1.2.3:5000", []string{"198.51.100.1, 10.9.9.9"}, "198.51.100.1"},            // two proxies of the config
		{"10.1.2.3:5000", []string{"1.2.3.4", "198.51.100.1, 10.9.9.9"}, "198.51.100.1"}, // over two header lines
		{"10.1.2.3:5000", []string{"garbage, 10.9.9.9"}, "10.9.9.9"},
		{"10.1.2.3:5000", []string{"garbage"}, "10.1.2.3"},
		{"[::1]:443", []string{"::ffff:198.51.100.1"}, "198.51.100.1"},
		{"10.1.2.3:5000", []string{"10.4.4.4"}, "10.4.4.4"}, // every hop a proxy: the farthest
	} {
		r := &http.Request{RemoteAddr: c.remote, Header: http.Header{}}
		for _, v := range c.xff {
			r.Header.Add("X-Forwarded-For", v)
		}
		if got := trusted.Client(r); got != c.want {
			t.Errorf("%s, X-Forwarded-For %q: %s, want %s", c.remote, c.xff, got, c.want)
		}
		want := c.want // and the proxy, when it is another address
		if peer, _, _ := net.SplitHostPort(c.remote); peer != c.want {
			want += " via " + peer
		}
		if got := trusted.Remote(r); got != want {
			t.Errorf("%s, X-Forwarded-For %q: remote %s, want %s", c.remote, c.xff, got, want)
		}
	}
}
