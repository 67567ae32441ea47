package main

import (
	"errors"
	"strings"
	"testing"

	"exacto.dev/pkg/dlq"
)

// The CLI's who-and-why check is dlq.NeedWhoWhy's, its error naming the flag.
func TestNeedWhoWhyFlags(t *testing.T) {
	for _, c := range []struct {
		by, why, flag string
		want          error
	}{{"ana", "fixed", "", nil}, {"", "fixed", "--by is required", dlq.ErrNoWho}, {"ana", "  ", "--why is required", dlq.ErrNoWhy}} {
		err := needWhoWhy(c.by, c.why)
		if !errors.Is(err, c.want) || (c.want == nil) != (err == nil) || (err != nil && !strings.HasPrefix(err.Error(), c.flag+": ")) {
			t.Errorf("needWhoWhy(%q, %q) = %v, want %v naming %s", c.by, c.why, err, c.want, c.flag)
		}
	}
}
