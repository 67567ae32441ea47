// Command suppressor runs the suppressor alone against EXACTO_NATS_URL; `exacto worker
// suppressor` is the same.
package main

import (
	"exacto.dev/pkg/service"
	"exacto.dev/services/suppressor/handler"
)

func main() { service.Main("suppressor", handler.Run) }
