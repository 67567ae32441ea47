// Package permute gives every order of n things, for the property tests that check a
// result does not depend on arrival order.
package permute

import (
	"iter"
	"slices"
)

// Orders yields every permutation of the indexes 0..n-1 (n! of them), each a new slice.
func Orders(n int) iter.Seq[[]int] {
	return func(yield func([]int) bool) {
		p := make([]int, n)
		for i := range p {
			p[i] = i
		}
		var rec func(k int) bool
		rec = func(k int) bool {
			if k == n {
				return yield(slices.Clone(p))
			}
			for i := k; i < n; i++ {
				p[k], p[i] = p[i], p[k]
				ok := rec(k + 1)
				p[k], p[i] = p[i], p[k]
				if !ok {
					return false
				}
			}
			return true
		}
		rec(0)
	}
}
