// Command reconciler runs the scheduled reconciliation alone against EXACTO_NATS_URL;
// `exacto reconciler` is the same.
package main

import (
	"exacto.dev/pkg/service"
	"exacto.dev/services/reconciler/handler"
)

func main() { service.Main("reconciler", handler.Run) }
