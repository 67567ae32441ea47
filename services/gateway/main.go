// Command gateway runs the webhook gateway alone against EXACTO_NATS_URL; `exacto
// gateway` is the same.
package main

import (
	"context"

	"exacto.dev/pkg/service"
	"exacto.dev/services/gateway/server"
)

func main() {
	service.Main("gateway", func(ctx context.Context, env *service.Env) error {
		return server.Run(ctx, env.Config, env.Conn.JS, env.Log, func(addr string) { env.Log.Info("gateway listening", "addr", addr) })
	})
}
