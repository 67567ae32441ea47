package server

import (
	"context"
	"errors"
	"log/slog"
	"net/http"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"exacto.dev/pkg/config"
	"exacto.dev/pkg/listen"
	"exacto.dev/pkg/service"
)

// Run serves the gateway and its indexer until ctx ends, then stops accepting and lets
// in-flight deliveries finish (each still answered only after its PubAck). ready, if
// not nil, receives the bound address once the listener is up.
func Run(ctx context.Context, cfg *config.Config, js jetstream.JetStream, log *slog.Logger, ready func(addr string)) error {
	return RunWith(ctx, Options{Config: cfg, JS: js, Log: log}, ready)
}

// RunWith is Run with every option (a shared group committer).
func RunWith(ctx context.Context, o Options, ready func(addr string)) error {
	cfg, js, log := o.Config, o.JS, o.Log
	gw, err := New(ctx, o)
	if err != nil {
		return err
	}
	idx, err := NewIndexer(ctx, js, o.Checkpoints, log)
	if err != nil {
		return err
	}
	ln, err := listen.TCP("http_addr", cfg.HTTPAddr)
	if err != nil {
		return err
	}
	if ready != nil {
		ready(ln.Addr().String())
	}
	srv := gw.HTTPServer(cfg.HTTPAddr)
	idxCtx, stopIdx := context.WithCancel(context.Background())
	idxDone := make(chan error, 1)
	go func() { idxDone <- idx.Run(idxCtx) }()
	served := make(chan error, 1)
	go func() { served <- srv.Serve(ln) }()
	select {
	case err = <-served:
	case <-ctx.Done():
		shutCtx, cancel := context.WithTimeout(context.Background(), cfg.Gateway.PublishTimeout+5*time.Second)
		err = srv.Shutdown(shutCtx)
		cancel()
	}
	gw.Close() // no request is in flight any more
	stopIdx()
	<-idxDone
	if errors.Is(err, http.ErrServerClosed) {
		err = nil
	}
	return err
}

// Serve runs the gateway of a started process (a service.Run): up once it listens.
func Serve(ctx context.Context, env *service.Env, up func()) error {
	checkpoints, err := env.Checkpoints(ctx)
	if err != nil {
		return err
	}
	return RunWith(ctx, Options{Config: env.Config, JS: env.Conn.JS, Log: env.Log, Commit: env.Commit, Checkpoints: checkpoints, StoreDir: env.StoreDir()}, func(addr string) {
		env.Log.Info("gateway listening", "addr", addr)
		up()
	})
}
