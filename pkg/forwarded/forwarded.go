// Package forwarded says which scheme a client used, believing X-Forwarded-Proto only
// from the proxies the config trusts (trusted_proxies). Any client can send the
// header: believed from anyone, it would make a HubSpot v3 signature verify over a URL
// the provider never called, and mark a console session cookie Secure or not at the
// client's word.
package forwarded

import (
	"fmt"
	"net"
	"net/http"
	"net/netip"
	"strings"
)

// DefaultTrusted are the proxies believed when the config names none: a TLS proxy on
// the same machine.
var DefaultTrusted = []string{"127.0.0.0/8", "::1/128"}

// Trusted are the networks whose X-Forwarded-Proto is believed.
type Trusted []netip.Prefix

// Parse reads CIDRs ("10.0.0.0/8") or single addresses ("10.0.0.7").
func Parse(cidrs []string) (Trusted, error) {
	var t Trusted
	for _, c := range cidrs {
		if !strings.Contains(c, "/") {
			a, err := netip.ParseAddr(c)
			if err != nil {
				return nil, fmt.Errorf("trusted_proxies: %q is not an address or a CIDR", c)
			}
			t = append(t, netip.PrefixFrom(a, a.BitLen()))
			continue
		}
		p, err := netip.ParsePrefix(c)
		if err != nil {
			return nil, fmt.Errorf("trusted_proxies: %q is not an address or a CIDR", c)
		}
		t = append(t, p.Masked())
	}
	return t, nil
}

// Scheme is "https" when r came over TLS, or when a trusted proxy sent it and its
// X-Forwarded-Proto says https (the first value: the client's side); else "http".
func (t Trusted) Scheme(r *http.Request) string {
	if r.TLS != nil {
		return "https"
	}
	if p := r.Header.Get("X-Forwarded-Proto"); p != "" && t.trusts(r.RemoteAddr) {
		if strings.EqualFold(strings.TrimSpace(strings.Split(p, ",")[0]), "https") {
			return "https"
		}
	}
	return "http"
}

// trusts reports whether remote (host:port, as http.Request.RemoteAddr) is a proxy of t.
func (t Trusted) trusts(remote string) bool {
	host, _, err := net.SplitHostPort(remote)
	if err != nil {
		host = remote
	}
	a, err := netip.ParseAddr(host)
	if err != nil {
		return false
	}
	a = a.Unmap() // an IPv4 peer on a dual-stack listener
	for _, p := range t {
		if p.Contains(a) {
			return true
		}
	}
	return false
}
