// Command projector runs the projector alone against EXACTO_NATS_URL; `exacto projector` is the same.
package main

import (
	"exacto.dev/pkg/service"
	"exacto.dev/services/projector/handler"
)

func main() { service.Main("projector", handler.Run) }
