// Command gateway runs the webhook gateway alone against EXACTO_NATS_URL; `exacto
// gateway` is the same.
package main

import (
	"exacto.dev/pkg/service"
	"exacto.dev/services/gateway/server"
)

func main() { service.Main("gateway", server.Serve) }
