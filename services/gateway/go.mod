module exacto.dev/services/gateway

go 1.26.8

require exacto.dev/pkg v0.0.0

replace exacto.dev/pkg => ../../pkg
