"""PostgreSQL schema migration 9 (re-encoding, ``mempp reembed``): the staging table and the
content guard's one more way through. Kept apart from ``schema`` for size; applied with the
others (``schema.MIGRATIONS``)."""

from __future__ import annotations

from mempp.store.migrations import Migration

REEMBED_MIGRATION = Migration(
    9,
    "reembed: new vectors staged beside the records, swapped in by one transaction",
    (
        # One new vector per record while a re-encoding is under way (its target encoder
        # is in mempp_meta as reembed_encoder / reembed_dim); emptied by the switch.
        """CREATE TABLE reembed_vectors (
            record_id BIGINT PRIMARY KEY,
            embedding vector NOT NULL)""",
        # As migration 6's guard, with one more way through: inside the switch's
        # transaction (mempp.reembed_switching set locally), a row's vector may become
        # the one staged for it, everything else of the row staying as it is, and only
        # for the table's owner (who may drop the triggers anyway; the switch alters the
        # table, which needs ownership too): a role that may only write rows gains
        # nothing from the setting.
        """CREATE OR REPLACE FUNCTION mempp_guard_content() RETURNS trigger
        LANGUAGE plpgsql AS $$
        BEGIN
            IF coalesce(current_setting('mempp.reembed_switching', true), '') = 'on'
               AND pg_has_role((SELECT relowner FROM pg_class WHERE oid = TG_RELID),
                               'MEMBER')
               AND NEW.embedding = (SELECT v.embedding FROM reembed_vectors v
                                    WHERE v.record_id = OLD.id)
               AND (NEW.id, NEW.scope, NEW.text, NEW.text_hash, NEW.ingested_at,
                    NEW.ingested_key) = (OLD.id, OLD.scope, OLD.text, OLD.text_hash,
                    OLD.ingested_at, OLD.ingested_key)
               AND NEW.author IS NOT DISTINCT FROM OLD.author
               AND NEW.event_date IS NOT DISTINCT FROM OLD.event_date
               AND NEW.event_key IS NOT DISTINCT FROM OLD.event_key
               AND NEW.tags IS NOT DISTINCT FROM OLD.tags
               AND NEW.source IS NOT DISTINCT FROM OLD.source
               AND NEW.thread IS NOT DISTINCT FROM OLD.thread
               AND NEW.metadata IS NOT DISTINCT FROM OLD.metadata THEN
                RETURN NEW;
            END IF;
            IF NOT mempp_redaction_pending(OLD.scope, OLD.id) THEN
                RAISE EXCEPTION
                    'mempp: a record''s content never changes; only its state may'
                    USING ERRCODE = 'integrity_constraint_violation';
            END IF;
            IF NEW.id = OLD.id AND NEW.scope = OLD.scope AND NEW.text = ''
               AND NEW.text_hash = '\\x'::bytea AND NEW.author IS NULL
               AND NEW.event_date IS NOT DISTINCT FROM OLD.event_date
               AND NEW.event_key IS NOT DISTINCT FROM OLD.event_key
               AND NEW.tags = '{}' AND NEW.source IS NULL AND NEW.thread IS NULL
               AND NEW.metadata IS NULL
               AND NEW.ingested_at = OLD.ingested_at
               AND NEW.ingested_key = OLD.ingested_key
               AND vector_norm(NEW.embedding) = 0 THEN
                RETURN NEW;
            END IF;
            RAISE EXCEPTION 'mempp: a redaction erases content; it writes nothing else'
                USING ERRCODE = 'integrity_constraint_violation';
        END $$""",
    ),
)
