// Command suppressor runs the suppressor alone against EXACTO_NATS_URL; `exacto worker
// suppressor` is the same.
package main

import (
	"context"
	"fmt"
	"os"
	"os/signal"
	"syscall"

	"exacto.dev/pkg/service"
	"exacto.dev/pkg/stream"
	"exacto.dev/services/suppressor/handler"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	env, err := service.Start(ctx, service.Options{Name: "exacto-" + stream.Suppressor})
	if err == nil {
		defer env.Close()
		err = handler.Run(ctx, env)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "suppressor:", err)
		os.Exit(1)
	}
}
