// Command gateway runs the webhook gateway alone against EXACTO_NATS_URL; `exacto
// gateway` is the same.
package main

import (
	"context"
	"fmt"
	"os"
	"os/signal"
	"syscall"

	"exacto.dev/pkg/service"
	"exacto.dev/services/gateway/server"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx); err != nil {
		fmt.Fprintln(os.Stderr, "gateway:", err)
		os.Exit(1)
	}
}

func run(ctx context.Context) error {
	env, err := service.Start(ctx, service.Options{Name: "exacto-gateway"})
	if err != nil {
		return err
	}
	defer env.Close()
	return server.Run(ctx, env.Config, env.Conn.JS, env.Log, func(addr string) { env.Log.Info("gateway listening", "addr", addr) })
}
