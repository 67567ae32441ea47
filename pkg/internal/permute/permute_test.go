package permute

import (
	"fmt"
	"testing"
)

func TestOrders(t *testing.T) {
	seen := map[string]bool{}
	for o := range Orders(4) {
		seen[fmt.Sprint(o)] = true
	}
	if len(seen) != 24 {
		t.Fatalf("%d distinct orders of 4, want 24", len(seen))
	}
	n := 0
	for range Orders(5) {
		if n++; n == 3 {
			break
		}
	}
	if n != 3 {
		t.Fatalf("stopped after %d", n)
	}
}
