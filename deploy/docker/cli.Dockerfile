# quire (the operator CLI), FROM scratch: built by deploy/docker/build-images.sh
# from this machine's release build. Also the compose stack's cert init step.
FROM scratch
COPY base/ /
COPY bin/quire /usr/local/bin/quire
ENV QUIRE_CERTS_DIR=/certs
ENTRYPOINT ["/usr/local/bin/quire"]
