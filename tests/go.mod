module exacto.dev/tests

go 1.26.8

require (
	exacto.dev/pkg v0.0.0
	exacto.dev/services/gateway v0.0.0
)

replace (
	exacto.dev/pkg => ../pkg
	exacto.dev/services/gateway => ../services/gateway
)
