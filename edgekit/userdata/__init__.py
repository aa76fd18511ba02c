"""The user's data: calibration and evidence sets (folders of .npy/.npz, images, text files), read in
checked batches. Quantization calibrates on them and fidelity judges on them.

``sets``    sets of .npy/.npz files streamed in checked batches, and which kind a path holds
``images``  image folders decoded and pre-processed as the model expects
``text``    text files tokenized as the model expects

Nothing is imported here: each module is imported by name (numpy loads on use).
"""
