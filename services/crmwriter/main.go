// Command crmwriter runs the crmwriter alone against EXACTO_NATS_URL; `exacto worker crmwriter` is the same.
package main

import (
	"exacto.dev/pkg/service"
	"exacto.dev/services/crmwriter/handler"
)

func main() { service.Main("crmwriter", handler.Run) }
