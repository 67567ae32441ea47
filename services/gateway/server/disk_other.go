//go:build !unix

package server

import "errors"

// freeDisk is not watched where statfs is not: the store's own errors tell.
func freeDisk(string) (int64, error) {
	return 0, errors.New("free disk space is not read on this system")
}
