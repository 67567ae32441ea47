package main

import (
	"encoding/json"
	"fmt"
	"io"
	"strings"

	"github.com/spf13/cobra"

	"exacto.dev/pkg/classify"
)

func classifyCmd() *cobra.Command {
	var lang string
	cmd := &cobra.Command{
		Use:   "classify",
		Short: "Classify the reply text on stdin",
		Long: `Classify the reply text on stdin with the shipped deterministic classifier and
print {"label","confidence","evidence":[…],"language","action"}. It reads English,
Spanish and Portuguese; a reply in French or German is said to be so and goes to human
review, and --lang with a language it does not read is refused. Quoted history and
signatures are stripped first. Below the confidence threshold the action is
human_review: nothing is ever booked or sent because a text looks positive.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := classify.CheckLanguage(lang); err != nil {
				return fmt.Errorf("--lang %s: %w", lang, err)
			}
			text, err := io.ReadAll(io.LimitReader(cmd.InOrStdin(), 1<<20))
			if err != nil {
				return err
			}
			if strings.TrimSpace(string(text)) == "" {
				return fmt.Errorf("no text on stdin")
			}
			res, err := classify.New().Classify(cmd.Context(), string(text), lang)
			if err != nil {
				return err
			}
			return json.NewEncoder(cmd.OutOrStdout()).Encode(res)
		},
	}
	cmd.Flags().StringVar(&lang, "lang", "", "language of the text: en, es or pt (default: detected)")
	return cmd
}
