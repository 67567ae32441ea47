// Command classifier runs the reply classifier alone against EXACTO_NATS_URL; `exacto
// worker classifier` is the same.
package main

import (
	"context"
	"fmt"
	"os"
	"os/signal"
	"syscall"

	"exacto.dev/pkg/service"
	"exacto.dev/pkg/stream"
	"exacto.dev/services/classifier/handler"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	env, err := service.Start(ctx, service.Options{Name: "exacto-" + stream.Classifier})
	if err == nil {
		defer env.Close()
		err = handler.Run(ctx, env)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "classifier:", err)
		os.Exit(1)
	}
}
