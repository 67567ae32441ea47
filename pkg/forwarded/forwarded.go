// Package forwarded says which scheme and host a client asked for and from which
// address, believing X-Forwarded-Proto, -Host and -For only from the proxies the config
// trusts (trusted_proxies). Any client can send them: believed from anyone, they would
// make a HubSpot v3 signature verify over a URL the provider never called, mark a
// console session cookie Secure or not, and vouch for a form's origin at the client's
// word.
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
	if strings.EqualFold(t.first(r, "X-Forwarded-Proto"), "https") {
		return "https"
	}
	return "http"
}

// Host is the host the client asked a trusted proxy for (X-Forwarded-Host, its first
// value); "" when r came from no proxy of t or it says none.
func (t Trusted) Host(r *http.Request) string { return t.first(r, "X-Forwarded-Host") }

// first is the first value of header (the client's side) when a proxy of t sent r.
func (t Trusted) first(r *http.Request, header string) string {
	v := r.Header.Get(header)
	if v == "" || !t.trusts(r) {
		return ""
	}
	return strings.TrimSpace(strings.Split(v, ",")[0])
}

// Client is the address r came from: its peer's, or, when the peer is a trusted
// proxy, the nearest address in X-Forwarded-For that is not a trusted proxy's. Read
// from the right: a client can write the header's left part, never what the proxies
// append after it. The peer's address when the header says nothing readable.
func (t Trusted) Client(r *http.Request) string {
	peer := Peer(r)
	if !t.trusts(r) {
		return peer
	}
	var hops []string
	for _, v := range r.Header.Values("X-Forwarded-For") {
		hops = append(hops, strings.Split(v, ",")...)
	}
	client := peer
	for i := len(hops) - 1; i >= 0; i-- {
		a, err := netip.ParseAddr(strings.TrimSpace(hops[i]))
		if err != nil {
			break
		}
		client = a.Unmap().String()
		if !t.contains(a) {
			break
		}
	}
	return client
}

// Peer is the address r's connection came from (RemoteAddr without its port).
func Peer(r *http.Request) string {
	host, _, err := net.SplitHostPort(r.RemoteAddr)
	if err != nil {
		return r.RemoteAddr
	}
	return host
}

// trusts reports whether r came from a proxy of t.
func (t Trusted) trusts(r *http.Request) bool {
	a, err := netip.ParseAddr(Peer(r))
	return err == nil && t.contains(a)
}

// Remote describes where r came from for a log: the client, and the proxy it came
// through when that is another address ("198.51.100.7 via 127.0.0.1") — the client's
// address is only as true as that proxy's X-Forwarded-For.
func (t Trusted) Remote(r *http.Request) string {
	client, peer := t.Client(r), Peer(r)
	if peer != client {
		return client + " via " + peer
	}
	return client
}

// contains reports whether address a is a proxy of t.
func (t Trusted) contains(a netip.Addr) bool {
	a = a.Unmap() // an IPv4 peer on a dual-stack listener
	for _, p := range t {
		if p.Contains(a) {
			return true
		}
	}
	return false
}
