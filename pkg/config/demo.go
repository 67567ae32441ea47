package config

// Demo is the built-in config `exacto up` runs when no exacto.yaml is found: one
// endpoint per provider, with public literal secrets so `exacto send` works out of the
// box. Never use it for real traffic.
const Demo = `
console:
  token: demo-console-token
tenants:
  - id: demo
    endpoints:
      - id: instantly
        provider: instantly
        path_token: demo-instantly-token
        secrets: [demo-instantly-secret]
      - id: smartlead
        provider: smartlead
        path_token: demo-smartlead-token
        secrets: [demo-smartlead-secret]
      - id: hubspot
        provider: hubspot
        path_token: demo-hubspot-token
        secrets: [demo-hubspot-client-secret]
      - id: meta
        provider: meta
        path_token: demo-meta-wa-token
        secrets: [demo-meta-app-secret]
        verify_token: demo-meta-verify-token
      - id: stripe
        provider: stripe
        path_token: demo-stripe-token
        secrets: [whsec_demo_stripe_secret]
      - id: standard
        provider: standard
        path_token: demo-standard-token
        secrets: [whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw]
      - id: calendly
        provider: calendly
        path_token: demo-calendly-token
        secrets: [demo-calendly-signing-key]
`
