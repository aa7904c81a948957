package main

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"strconv"
	"time"

	promclient "github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"go.opentelemetry.io/otel/exporters/prometheus"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"

	"github.com/annals-go/annals/otelannals"
)

// demoMetrics is the demo's telemetry: package otelannals on an
// OpenTelemetry SDK meter provider whose one reader is a Prometheus
// exporter into a registry of its own (not the global one). The demo
// exports no spans: the adapter makes none, unless spans is set (to
// measure their cost), when every span is sampled by an SDK tracer
// provider and dropped, as with an exporter that sends nothing. When
// served, an HTTP server answers GET /metrics with the registry in the
// Prometheus text format.
type demoMetrics struct {
	tel      *otelannals.Telemetry
	provider *sdkmetric.MeterProvider
	server   *http.Server // nil when not served
	served   chan error   // the server's end
	url      string       // where /metrics is served; "" when not served
}

// startDemoMetrics makes the telemetry, with spans when spans is set, and
// serves it on addr unless addr is "". Close it with close.
func startDemoMetrics(addr string, spans bool) (*demoMetrics, error) {
	registry := promclient.NewRegistry()
	exporter, err := prometheus.New(prometheus.WithRegisterer(registry))
	if err != nil {
		return nil, fmt.Errorf("metrics: prometheus exporter: %w", err)
	}
	m := &demoMetrics{provider: sdkmetric.NewMeterProvider(sdkmetric.WithReader(exporter))}
	var tracers trace.TracerProvider
	if spans {
		tracers = sdktrace.NewTracerProvider(sdktrace.WithSampler(sdktrace.AlwaysSample()))
	}
	if m.tel, err = otelannals.New(m.provider, tracers); err != nil {
		return nil, errors.Join(err, m.provider.Shutdown(context.Background()))
	}
	if addr == "" {
		return m, nil
	}
	l, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, errors.Join(fmt.Errorf("metrics: %w", err), m.provider.Shutdown(context.Background()))
	}
	mux := http.NewServeMux()
	mux.Handle("GET /metrics", promhttp.HandlerFor(registry, promhttp.HandlerOpts{}))
	m.server = &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
	m.url = "http://" + urlHost(l.Addr()) + "/metrics"
	m.served = make(chan error, 1)
	go func() { m.served <- m.server.Serve(l) }()
	return m, nil
}

// urlHost is the host:port to print for a listener's address: a wildcard
// address (":9464") is printed as localhost.
func urlHost(a net.Addr) string {
	ta, ok := a.(*net.TCPAddr)
	if !ok {
		return a.String()
	}
	host := ta.IP.String()
	if ta.IP.IsUnspecified() {
		host = "localhost"
	}
	return net.JoinHostPort(host, strconv.Itoa(ta.Port))
}

// close stops the server (waiting up to 5 s for scrapes under way) and
// the meter provider.
func (m *demoMetrics) close() error {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	var errs []error
	if m.server != nil {
		errs = append(errs, m.server.Shutdown(ctx))
		if err := <-m.served; !errors.Is(err, http.ErrServerClosed) {
			errs = append(errs, err)
		}
	}
	errs = append(errs, m.provider.Shutdown(ctx))
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("metrics: %w", err)
	}
	return nil
}
