package listen

import (
	"net"
	"os"
	"strconv"
	"strings"
	"testing"
)

// A taken address is refused at once, naming what it was for and this very process
// as the one holding it.
func TestTakenAddressNamesItsHolder(t *testing.T) {
	held, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer held.Close()
	addr := held.Addr().String()
	_, err = TCP("http_addr", addr)
	want := "http_addr " + addr + " is in use by pid " + strconv.Itoa(os.Getpid()) + " ("
	if err == nil || !strings.Contains(err.Error(), want) || !strings.Contains(err.Error(), "set http_addr (EXACTO_HTTP_ADDR) to another address") {
		t.Fatalf("got %v, want it to contain %q", err, want)
	}
	if err := Free("nats.listen", addr); err == nil || !strings.Contains(err.Error(), "nats.listen "+addr) {
		t.Fatalf("Free: %v", err)
	}
	held.Close()
	if err := Free("nats.listen", addr); err != nil {
		t.Fatalf("a free address: %v", err)
	}
	if _, err := TCP("admin_addr", "127.0.0.1:notaport"); err == nil || !strings.HasPrefix(err.Error(), "admin_addr 127.0.0.1:notaport: ") {
		t.Fatalf("a bad address: %v", err)
	}
}
