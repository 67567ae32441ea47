package console

import (
	"context"
	"errors"
	"time"

	"exacto.dev/pkg/dlq"
	"exacto.dev/pkg/platform"
	"exacto.dev/pkg/service"
)

// Operations starts what a deployment needs exactly once, until ctx ends: the
// dead-letter queue's gauges (exacto_dlq_*, behind its SLO alert) and the operator
// console on the admin address when a token or users are configured. `exacto up` runs
// it, and so does the reconciler, the singleton of a deployment split into services.
func Operations(ctx context.Context, env *service.Env) error {
	q, err := dlq.New(ctx, env.Conn.JS, env.Config.DLQ)
	if err != nil {
		return err
	}
	go q.Watch(ctx, 30*time.Second, env.Log)
	h, err := New(Options{JS: env.Conn.JS, Config: env.Config, Metrics: env.Admin, Log: env.Log.With("part", "console"),
		Breakers: BreakerStates(env.Breakers, platform.Dependencies...), Sample: ctx})
	switch {
	case errors.Is(err, ErrNotConfigured):
		env.Log.Info("console not served: set console.token or console.users")
	case err != nil:
		return err
	default:
		Mount(env.Admin, h)
	}
	return nil
}
