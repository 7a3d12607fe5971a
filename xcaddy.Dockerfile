# Caddy with caddy-seckill, built the standard way (the Caddy builder image and xcaddy).
#   docker build -f xcaddy.Dockerfile -t caddy-seckill .
#   docker run -p 8080:8080 -v $PWD/Caddyfile.example:/etc/caddy/Caddyfile caddy-seckill
FROM caddy:2.11-builder AS builder
COPY . /src/caddy-seckill
# @v0.0.0 + a local replacement: builds this checkout without looking the module up on a proxy.
RUN xcaddy build --with github.com/caddy-seckill/caddy-seckill@v0.0.0=/src/caddy-seckill

FROM caddy:2.11
COPY --from=builder /usr/bin/caddy /usr/bin/caddy
