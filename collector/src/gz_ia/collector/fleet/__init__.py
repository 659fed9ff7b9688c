"""The fleet: many machines' sessions in one place, exactly once, over NATS JetStream (extra ``fleet``).

A collector with ``fleet.url`` ships what it has written (:mod:`.shipper`): every stored line of every
root it serves is published once to ``gzia.events.<host>.<root id>`` under a stable message id, and
its shipping position advances only on the stream's acknowledgement. A hub (``fleet.hub``) also
consumes the stream (:mod:`.hub`) and writes every machine's events through its own socket, as any
client does, into one root, acknowledging each message only after its verdict. The modules, bottom
to top: :mod:`.naming` (subjects, ids, the hub's session names), :mod:`.link` (the NATS connection
and the stream), :mod:`.positions` (the shipping positions), :mod:`.own_socket` (the hub's client of
its collector's socket), :mod:`.shipper`, :mod:`.hub`, :mod:`.runner` (the thread they run on).
"""
