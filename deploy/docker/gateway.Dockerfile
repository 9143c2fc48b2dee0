# quire-gateway, FROM scratch: built by deploy/docker/build-images.sh from this
# machine's release build (no registry needed).
FROM scratch
COPY base/ /
COPY bin/quire /usr/local/bin/quire
COPY bin/quire-gateway /usr/local/bin/quire-gateway
ENV QUIRE_CERTS_DIR=/certs
USER 10001:10001
ENTRYPOINT ["/usr/local/bin/quire-gateway"]
