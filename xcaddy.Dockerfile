# Caddy with caddy-seckill, built the standard way (the Caddy builder image and xcaddy), serving
# Caddyfile.example's demo sale and its page: the Docker quick start of README.md, "Docker".
#   docker build -f xcaddy.Dockerfile -t caddy-seckill .
#   docker run --rm -p 8080:8080 -e SECKILL_DEMO_ALLOW=private -v seckill-data:/srv/seckill-data caddy-seckill
FROM caddy:2.11-builder AS builder
COPY . /src/caddy-seckill
# @v0.0.0 + a local replacement: builds this checkout without looking the module up on a proxy.
RUN xcaddy build --with github.com/caddy-seckill/caddy-seckill@v0.0.0=/src/caddy-seckill

FROM caddy:2.11
COPY --from=builder /usr/bin/caddy /usr/bin/caddy
# Caddyfile.example's relative paths (root web, store local ./seckill-data) are under the image's
# working directory, /srv. Only the page's own files: file_server would serve anything in web/.
WORKDIR /srv
COPY web/index.html web/*.js web/*.css /srv/web/
COPY Caddyfile.example /etc/caddy/Caddyfile
# The sale (store local) and its orders: kept in a volume, so a new container goes on with it.
VOLUME /srv/seckill-data
