package main

import (
	"fmt"
	"maps"
	"os"
	"slices"
	"strings"

	"github.com/nats-io/nats.go"
	"github.com/spf13/cobra"

	"exacto.dev/pkg/config"
	"exacto.dev/pkg/contacts"
	"exacto.dev/pkg/lifecycle"
	"exacto.dev/pkg/projection"
)

// contactCmd and campaignCmd read the live projections through their read API.
func contactCmd() *cobra.Command {
	return showCmd("contact", "EMAIL|PHONE|PLATFORM:ID", "A contact's ids, status and status in each campaign (found by e-mail, phone, or an id such as hubspot:901 or instantly:<lead id>)")
}

func campaignCmd() *cobra.Command {
	return showCmd("campaign", "ID", "A campaign's contacts by status, replies, bounces, unsubscribes, meetings")
}

func showCmd(what, arg, short string) *cobra.Command {
	var natsURL, tenant, configFile string
	cmd := &cobra.Command{Use: what, Short: short + " (live projection)"}
	show := &cobra.Command{
		Use:   "show " + arg,
		Short: short,
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			tenant, err := tenantOrOnly(tenant, configFile)
			if err != nil {
				return err
			}
			js, closeConn, err := dial(natsURL)
			if err != nil {
				return err
			}
			defer closeConn()
			ctx := cmd.Context()
			stores, err := projection.Open(ctx, js, "", 1)
			if err != nil {
				return err
			}
			dir, err := contacts.Open(ctx, js)
			if err != nil {
				return err
			}
			r := projection.Reader{Stores: stores, Dir: dir}
			var out any
			if what == "campaign" {
				counts, err := r.Campaign(ctx, tenant, args[0])
				if err != nil {
					return err
				}
				if counts.Contacts == 0 {
					return fmt.Errorf("no contact of tenant %s in campaign %q", tenant, args[0])
				}
				out = map[string]any{"tenant": tenant, "campaign": args[0], "counts": counts}
			} else {
				kind, value := contactKey(args[0])
				c, ok, err := r.ContactByKey(ctx, tenant, kind, value)
				if err != nil {
					return err
				}
				if !ok {
					return fmt.Errorf("no contact %q in tenant %s", args[0], tenant)
				}
				inCampaigns := map[string]lifecycle.View{}
				for _, id := range slices.Sorted(maps.Keys(c.Campaigns)) {
					inCampaigns[id] = c.InCampaign(id)
				}
				s, suppressed, err := r.Suppressed(ctx, tenant, c.ContactID)
				if err != nil {
					return err
				}
				shown := map[string]any{"tenant": tenant, "contact_id": c.ContactID, "account_id": c.AccountID, "keys": c.Keys,
					"external": c.External, "view": c.View(), "replied": c.Replied(), "campaigns": inCampaigns}
				if suppressed {
					shown["suppression"] = s
				}
				out = shown
			}
			return printJSON(cmd.OutOrStdout(), out)
		},
	}
	show.Flags().StringVar(&tenant, "tenant", "", "tenant id (default: the config's tenant, when it has one)")
	show.Flags().StringVar(&configFile, "config", "", "config file naming the tenants (default ./exacto.yaml, else the built-in demo)")
	show.Flags().StringVar(&natsURL, "nats-url", nats.DefaultURL, "NATS of the deployment")
	cmd.AddCommand(show)
	return cmd
}

// tenantOrOnly is the tenant given, else the config's only one: a config of several
// tenants makes --tenant required, saying which there are.
func tenantOrOnly(given, configFile string) (string, error) {
	if given != "" {
		return given, nil
	}
	cfg, err := config.LoadPartial(configFile, os.Getenv) // its tenants, not their secrets
	if err != nil {
		return "", fmt.Errorf("--tenant is required: the config did not load to tell its tenant (%w)", err)
	}
	if ids := cfg.TenantIDs(); len(ids) != 1 {
		return "", fmt.Errorf("--tenant is required: %s has %d tenants (%s)", cfg.Source, len(ids), strings.Join(ids, ", "))
	}
	return cfg.Tenants[0].ID, nil
}

// contactKey reads what `contact show` was given: an e-mail, an id of a system
// ("hubspot:901", "instantly:<lead id>", "smartlead:<lead id>", "clay:<record id>"), or
// a phone number.
func contactKey(arg string) (kind, value string) {
	if p, _, ok := strings.Cut(arg, ":"); ok && !strings.Contains(arg, "@") {
		switch p {
		case "hubspot":
			return contacts.CRMContactID, arg
		case "instantly", "smartlead":
			return contacts.SendingPlatformContactID, arg
		case "clay":
			return contacts.ClayRecordID, arg
		}
	}
	if strings.Contains(arg, "@") {
		return "email", arg
	}
	return "phone", arg
}
