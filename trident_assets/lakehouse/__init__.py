"""Publishing committed txids to lakehouse tables: Delta Lake and Apache Iceberg.

A topology's publications (``TridentState.publish``, ``Stream.publish``) each get a
:class:`~.publisher.TablePublisher` bound to the store; after every commit the runner brings
each table up to the store's commit marker, one table commit per txid, stamped with the txid
(:mod:`.delta`, :mod:`.iceberg`). The marker is the truth: a table is never ahead of it, and a
txid already in the table is never written again.
"""
