package console

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"net/url"
)

// An action redirects to a page with its outcome in the query (done=… or err=…),
// signed with the console's key: a page shows a notice only if this console wrote it.
// A link that put words in the console's mouth ("?done=Your session expired, call …",
// issue 16) shows nothing. The key is made at start-up, so a notice does not outlive
// the process; the page itself still shows the state.

// withNotice sets q's key (done or err) to msg, signed.
func (c *console) withNotice(q url.Values, key, msg string) url.Values {
	if q == nil {
		q = url.Values{}
	}
	q.Set(key, msg)
	q.Set(key+"_sig", c.noticeSig(key, msg))
	return q
}

// notices are the signed notices of q: what succeeded and what was refused.
func (c *console) notices(q url.Values) (done, failed string) {
	get := func(key string) string {
		msg := q.Get(key)
		if msg == "" || !hmac.Equal([]byte(q.Get(key+"_sig")), []byte(c.noticeSig(key, msg))) {
			return ""
		}
		return msg
	}
	return get("done"), get("err")
}

func (c *console) noticeSig(key, msg string) string {
	m := hmac.New(sha256.New, c.key[:])
	m.Write([]byte("notice\x00" + key + "\x00" + msg))
	return base64.RawURLEncoding.EncodeToString(m.Sum(nil))
}
