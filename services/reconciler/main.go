// Command reconciler runs the scheduled reconciliation alone against EXACTO_NATS_URL;
// `exacto reconciler` is the same. As the one singleton of a deployment split into
// services, it also serves the dead-letter queue's gauges and the operator console.
package main

import (
	"context"

	"exacto.dev/pkg/console"
	"exacto.dev/pkg/service"
	"exacto.dev/services/reconciler/handler"
)

func main() {
	service.Main("reconciler", func(ctx context.Context, env *service.Env, up func()) error {
		if err := console.Operations(ctx, env); err != nil {
			return err
		}
		return handler.Run(ctx, env, up)
	})
}
