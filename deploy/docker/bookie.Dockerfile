# quire-bookie, FROM scratch: built by deploy/docker/build-images.sh from this
# machine's release build (no registry needed).
FROM scratch
COPY base/ /
COPY bin/quire /usr/local/bin/quire
COPY bin/quire-bookie /usr/local/bin/quire-bookie
ENV QUIRE_CERTS_DIR=/certs
COPY --chown=10001:10001 owned/ /data/
USER 10001:10001
ENTRYPOINT ["/usr/local/bin/quire-bookie"]
