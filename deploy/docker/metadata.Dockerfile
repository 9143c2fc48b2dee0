# quire-metadata, FROM scratch: built by deploy/docker/build-images.sh from this
# machine's release build (no registry needed).
FROM scratch
COPY base/ /
COPY bin/quire /usr/local/bin/quire
COPY bin/quire-metadata /usr/local/bin/quire-metadata
ENV QUIRE_CERTS_DIR=/certs
ENTRYPOINT ["/usr/local/bin/quire-metadata"]
