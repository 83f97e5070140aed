-- Make the schema distributable by user_id (Citus): the distribution column must be part
-- of every primary key and unique constraint. The unique constraints already start with
-- user_id and memory_index_state is keyed by user_id alone; the spec's `id` primary keys
-- become (user_id, id). `id` keeps its sequence and stays unique on its own in practice.
-- Run once, in a maintenance window, before create_distributed_table (docs/SCALING.md).
BEGIN;
ALTER TABLE user_memory DROP CONSTRAINT user_memory_pkey;
ALTER TABLE user_memory ADD CONSTRAINT user_memory_pkey PRIMARY KEY (user_id, id);
ALTER TABLE memory_embeddings DROP CONSTRAINT memory_embeddings_pkey;
ALTER TABLE memory_embeddings ADD CONSTRAINT memory_embeddings_pkey PRIMARY KEY (user_id, id);
ALTER TABLE user_skill_configs DROP CONSTRAINT user_skill_configs_pkey;
ALTER TABLE user_skill_configs ADD CONSTRAINT user_skill_configs_pkey PRIMARY KEY (user_id, id);
COMMIT;
