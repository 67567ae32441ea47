package broker

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"

	"exacto.dev/pkg/listen"
)

// lockDataDir holds an exclusive lock on dir's lock file for as long as the embedded
// server serves the store in it: two servers writing one store would corrupt it, and
// nats-server itself does not refuse the second. The lock goes with the process (a
// kill -9 leaves no stale lock); the file names the holder's pid.
func lockDataDir(dir string) (unlock func(), err error) {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("data dir %s: %w", dir, err)
	}
	path := filepath.Join(dir, "exacto.lock")
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		return nil, fmt.Errorf("data dir %s: %w", dir, err)
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		f.Close()
		holder := "another process"
		if b, rerr := os.ReadFile(path); rerr == nil {
			if pid := strings.TrimSpace(string(b)); pid != "" {
				holder = "pid " + pid + " (" + listen.Command(pid) + ")"
			}
		}
		abs, _ := filepath.Abs(dir)
		return nil, fmt.Errorf("data dir %s is in use by %s: stop it, or give this one another data_dir (EXACTO_DATA_DIR)", abs, holder)
	}
	if err := f.Truncate(0); err == nil {
		f.WriteAt([]byte(strconv.Itoa(os.Getpid())+"\n"), 0)
	}
	return func() { f.Close() }, nil
}
