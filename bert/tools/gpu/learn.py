"""The settings under which the fused kernels' width (1024) learns the synthetic language
within a GPU window's few steps, shared by its training runs (train_compare.py, smoke_train.py):
a comparison of runs that learned nothing agrees at accuracy 0 and cannot fail."""

# What lets the fused kernels' width (1024, FFN 4096) learn the hidden language within the
# steps: the default run's vocabulary (1024: 920 words), LAMB at 1e-2 after a short warmup,
# BERT-Large's initializer_range 0.02 (tiny_cpu's 0.08 suits its width 128) and above all the
# batch. Measured on the CPU (hidden 1024, 16 heads, fp32, per_sequence; final eval MLM
# accuracy at the step named; a run cut short keeps a schedule of 200-300), these settings but:
#   2 layers, FFN 4096, batch 128 (the CUDA shape)  0.75 at 50
#   2 layers, FFN 4096, batch 64                    0.007 at 45 (lr 2e-2: 0.001 at 60;
#                                                   init 0.04: 0.001 at 60)
#   1 layer, FFN 1024, batch 64, 200 steps          0.29 / 0.73 / 0.75 / 0.77 at 50-200
#   1 layer, FFN 1024, batch 16                     0.003 at 120 (lr 5e-2 or init 0.04: 0)
# Before them, train_compare's CUDA runs took vocab 30522 and batch 64 and inherited
# tiny_cpu.yaml's init 0.08 and warmup 50 of 800 steps (run_pretraining.py's default config):
# both runs of the 2026-11-26b window ended at 0.0000 (loss 15.4 -> 9.9); so did every eval of
# the smoke's 8 steps of vocab 30522, batch 16 in the 2026-11-28 window.
LEARN = {
    "model.vocab_size": 1024,
    "model.initializer_range": 0.02,
    "optim.lr": 1e-2,
    "schedule.warmup_steps": 20,
}
# The GPU runs' model and batch (train_compare, smoke_train, learning_proof): the fused kernels'
# width, two layers, flash_varlen, sequences of 128 with 20 predictions, batch 128, LEARN.
CUDA_SHAPE = {
    "model.hidden_size": 1024,
    "model.num_hidden_layers": 2,
    "model.num_attention_heads": 16,
    "model.intermediate_size": 4096,
    **LEARN,
    "model.max_position_embeddings": 512,
    "model.attention": "flash_varlen",
    "data.max_seq_length": 128,
    "data.max_predictions_per_seq": 20,
    "run.global_batch_size": 128,
}
