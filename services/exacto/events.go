package main

import (
	"encoding/json"
	"fmt"
	"strconv"

	"github.com/nats-io/nats.go"
	"github.com/spf13/cobra"

	"exacto.dev/pkg/consumer"
	"exacto.dev/pkg/envelope"
	"exacto.dev/pkg/guard"
	"exacto.dev/pkg/stream"
	"exacto.dev/services/gateway/server"
)

func eventsCmd() *cobra.Command {
	cmd := &cobra.Command{Use: "events", Short: "Look up stored events"}
	var natsURL string
	show := &cobra.Command{
		Use:   "show ID",
		Short: "One event: envelope, raw payload hash, arrivals, status in every consumer",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			js, closeConn, err := dial(natsURL)
			if err != nil {
				return err
			}
			defer closeConn()
			ctx := cmd.Context()
			id := args[0]
			seq, err := server.Lookup(ctx, js, id)
			if err != nil {
				return err
			}
			st, err := js.Stream(ctx, stream.Events)
			if err != nil {
				return err
			}
			msg, err := st.GetMsg(ctx, seq)
			if err != nil {
				return fmt.Errorf("stream sequence %d: %w", seq, err)
			}
			var env envelope.Envelope
			if err := json.Unmarshal(msg.Data, &env); err != nil {
				return err
			}
			arrivals := 1
			if kv, err := js.KeyValue(ctx, stream.Arrivals); err == nil {
				if e, err := kv.Get(ctx, id); err == nil {
					n, _ := strconv.Atoi(string(e.Value()))
					arrivals += n
				}
			}
			consumers := map[string]any{}
			if kv, err := js.KeyValue(ctx, stream.Guards); err == nil {
				statuses := consumer.NewStatuses(js, kv)
				for _, sub := range stream.Subscriptions {
					if !sub.Takes(msg.Subject) {
						consumers[sub.Durable] = map[string]string{"status": "not_subscribed"}
						continue
					}
					rec, ok, err := statuses.OfEvent(ctx, sub, env, seq)
					switch {
					case err != nil:
						consumers[sub.Durable] = map[string]string{"error": err.Error()}
					case ok:
						consumers[sub.Durable] = rec
					default: // stored and waiting: the consumer has not attempted it yet
						consumers[sub.Durable] = map[string]string{"status": guard.Received}
					}
				}
			}
			// The causal chain, both ways: what it was derived from, what was derived from it.
			derived, err := stream.DerivedFrom(ctx, js, env)
			if err != nil {
				return err
			}
			chain := make([]map[string]any, len(derived))
			for i, d := range derived {
				chain[i] = map[string]any{"id": d.ID, "type": d.Type, "at": d.Time}
				if c := d.Data.Classification; c != nil {
					chain[i]["classification"] = c
				}
			}
			// Every attempt, not only the last the guard records (a replay starts over).
			history, cut, err := consumer.History(ctx, js, env, msg.Time)
			if err != nil {
				return err
			}
			out := map[string]any{
				"id":            env.ID,
				"derived_from":  env.Data.Cause,
				"derived":       chain,
				"history":       history,
				"stream_seq":    seq,
				"subject":       msg.Subject,
				"stored_at":     msg.Time,
				"arrivals":      arrivals,
				"payloadsha256": env.PayloadSHA256,
				"consumers":     consumers,
				"envelope":      json.RawMessage(msg.Data),
			}
			if cut {
				out["history_cut"] = fmt.Sprintf("the first %d outcomes of its type read: there may be later ones", consumer.HistoryScanned)
			}
			return printJSON(cmd.OutOrStdout(), out)
		},
	}
	show.Flags().StringVar(&natsURL, "nats-url", nats.DefaultURL, "NATS to read from (a running `exacto up` listens on 127.0.0.1:4222)")
	cmd.AddCommand(show)
	return cmd
}
