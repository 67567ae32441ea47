//go:build unix

package server

import "golang.org/x/sys/unix"

// freeDisk is how many bytes an unprivileged writer may still write on dir's disk.
func freeDisk(dir string) (int64, error) {
	var st unix.Statfs_t
	if err := unix.Statfs(dir, &st); err != nil {
		return 0, err
	}
	return int64(st.Bavail) * int64(st.Bsize), nil
}
