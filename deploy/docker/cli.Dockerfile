# quire (the operator CLI), FROM scratch: built by deploy/docker/build-images.sh
# from this machine's release build. Also the compose stack's cert init step.
FROM scratch
COPY base/ /
COPY bin/quire /usr/local/bin/quire
ENV QUIRE_CERTS_DIR=/certs
COPY --chown=10001:10001 owned/ /ca/
COPY --chown=10001:10001 owned/ /out/metadata/
COPY --chown=10001:10001 owned/ /out/bookie/
COPY --chown=10001:10001 owned/ /out/auditor/
COPY --chown=10001:10001 owned/ /out/replication-worker/
COPY --chown=10001:10001 owned/ /out/gateway/
COPY --chown=10001:10001 owned/ /out/client/
COPY --chown=10001:10001 owned/ /out/admin/
USER 10001:10001
ENTRYPOINT ["/usr/local/bin/quire"]
