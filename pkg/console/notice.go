package console

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"net/http"
	"net/url"
)

// An action redirects to a page with its outcome in the query (done=… or err=…),
// signed with the console's key for that page: a page shows a notice only if this
// console wrote it, for it (a notice of one dead letter does not show on another's).
// A link that put words in the console's mouth ("?done=Your session expired, call …",
// issue 16) shows nothing. The key is made at start-up, so a notice does not outlive
// the process; the page itself still shows the state.

// withNotice sets q's key (done or err) to msg, signed for the page at path.
func (c *console) withNotice(path string, q url.Values, key, msg string) url.Values {
	if q == nil {
		q = url.Values{}
	}
	q.Set(key, msg)
	q.Set(key+"_sig", c.noticeSig(path, key, msg))
	return q
}

// notices are the notices r's query carries signed for r's page: what succeeded and
// what was refused.
func (c *console) notices(r *http.Request) (done, failed string) {
	q := r.URL.Query()
	get := func(key string) string {
		msg := q.Get(key)
		if msg == "" || !hmac.Equal([]byte(q.Get(key+"_sig")), []byte(c.noticeSig(r.URL.Path, key, msg))) {
			return ""
		}
		return msg
	}
	return get("done"), get("err")
}

func (c *console) noticeSig(path, key, msg string) string {
	m := hmac.New(sha256.New, c.key[:])
	m.Write([]byte("notice\x00" + path + "\x00" + key + "\x00" + msg))
	return base64.RawURLEncoding.EncodeToString(m.Sum(nil))
}
