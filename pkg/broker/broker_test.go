package broker

import (
	"net"
	"strings"
	"testing"
	"time"
)

// nats.listen with port 0 is nats-server's default port, 4222: taken, it is refused
// at once, naming 4222, not after the server's 30 s of retries.
func TestDefaultPortTakenIsSaidAtOnce(t *testing.T) {
	if ln, err := net.Listen("tcp", "127.0.0.1:4222"); err == nil {
		defer ln.Close()
	} // else something else holds it: refused all the same
	began := time.Now()
	_, err := Open("", Options{Listen: "127.0.0.1:0", DataDir: t.TempDir()}, "test")
	if err == nil || !strings.Contains(err.Error(), "nats.listen 127.0.0.1:4222 is in use") {
		t.Fatalf("got %v", err)
	}
	if took := time.Since(began); took > 5*time.Second {
		t.Fatalf("refused after %v", took)
	}
}
