// Command classifier runs the classifier alone against EXACTO_NATS_URL; `exacto worker
// classifier` is the same.
package main

import (
	"exacto.dev/pkg/service"
	"exacto.dev/services/classifier/handler"
)

func main() { service.Main("classifier", handler.Run) }
