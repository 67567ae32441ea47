// Package listen opens the process's listening sockets and, when an address is taken,
// says at once which one and who holds it: a second `exacto up` should not leave its
// user guessing.
package listen

import (
	"bufio"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
)

// TCP is net.Listen("tcp", addr); an address in use is an error naming what it is for
// (the config's key, whose environment twin is EXACTO_ and the key in capitals) and the
// process listening there.
func TCP(what, addr string) (net.Listener, error) {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, explain(what, addr, err)
	}
	return ln, nil
}

// Free checks that addr can be listened on, for a listener another library opens (the
// embedded NATS server, which would otherwise retry for 30 s before giving up).
func Free(what, addr string) error {
	ln, err := TCP(what, addr)
	if err != nil {
		return err
	}
	return ln.Close()
}

func explain(what, addr string, err error) error {
	if !errors.Is(err, syscall.EADDRINUSE) {
		return fmt.Errorf("%s %s: %w", what, addr, err)
	}
	who := "another process"
	if _, port, perr := net.SplitHostPort(addr); perr == nil {
		if p, perr := strconv.Atoi(port); perr == nil {
			if h := Holder(p); h != "" {
				who = h
			}
		}
	}
	env := "EXACTO_" + strings.ToUpper(strings.ReplaceAll(what, ".", "_"))
	return fmt.Errorf("%s %s is in use by %s: stop it, or set %s (%s) to another address", what, addr, who, what, env)
}

// Holder names the process listening on TCP port ("pid 4242 (exacto up)"), from
// /proc; "" where that cannot be read (another OS, another user's process).
func Holder(port int) string {
	inodes := map[string]bool{}
	for _, table := range []string{"/proc/net/tcp", "/proc/net/tcp6"} {
		for _, inode := range listening(table, port) {
			inodes["socket:["+inode+"]"] = true
		}
	}
	if len(inodes) == 0 {
		return ""
	}
	fds, _ := filepath.Glob("/proc/[0-9]*/fd/*")
	for _, fd := range fds {
		if link, err := os.Readlink(fd); err == nil && inodes[link] {
			pid := strings.Split(fd, "/")[2]
			return "pid " + pid + " (" + Command(pid) + ")"
		}
	}
	return ""
}

// Command is a process's command line, shortened to its program's name and arguments.
func Command(pid string) string {
	b, err := os.ReadFile("/proc/" + pid + "/cmdline")
	if err != nil || len(b) == 0 {
		return "?"
	}
	args := strings.Split(strings.TrimRight(string(b), "\x00"), "\x00")
	args[0] = filepath.Base(args[0])
	return strings.Join(args, " ")
}

// listening returns the socket inodes of table's rows listening on port.
func listening(table string, port int) []string {
	f, err := os.Open(table)
	if err != nil {
		return nil
	}
	defer f.Close()
	want := fmt.Sprintf(":%04X", port)
	var inodes []string
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		// sl local_address rem_address st tx:rx tr:when retrnsmt uid timeout inode
		fields := strings.Fields(sc.Text())
		if len(fields) > 9 && strings.HasSuffix(fields[1], want) && fields[3] == "0A" { // 0A: LISTEN
			inodes = append(inodes, fields[9])
		}
	}
	return inodes
}
