// Command stopper runs the stopper alone against EXACTO_NATS_URL; `exacto worker stopper` is the same.
package main

import (
	"exacto.dev/pkg/service"
	"exacto.dev/services/stopper/handler"
)

func main() { service.Main("stopper", handler.Run) }
