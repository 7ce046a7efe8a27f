#!/usr/bin/env python3
"""zoo.py - model zoos through fx2sg: each model exported (--trace auto:
torch.export, else torch.fx) and run forward by `sgc run`, its output
against PyTorch eager on the CPU.  A check of coverage, not a test suite:
it needs torch 2.x with torchvision, timm and transformers (no network:
models are built from their configs, no pretrained weights), which CI's
Debian torch lacks.  docs/models.md gives the last results.

    python3 tests/zoo/zoo.py PATH/TO/sgc [torchvision] [timm] [hf] [NAME...]

torchvision's classifiers at batch 1, 64x64 (224 for the transformers,
299 for Inception v3), 10 classes; its video classifiers at [1, 3, 8, 64,
64] (S3D and MViT v2 at [1, 3, 16, 224, 224]), segmentation models at 64x64 (their 'out'), RAFT at two 128x128
frames (its flow after two updates); timm's models at their native input
size; Hugging Face's language models from small configs (hidden 32, 2
layers, 4 heads, vocab 100), input_ids [2, 8], their logits, and its
encoder-decoders, speech, vision and multimodal models (HF_OTHER: T5,
BART, Whisper, Wav2Vec2, ViT, DINOv2, Swin, SegFormer, ConvNeXt V2,
CLIP, DETR, Mamba2, LLaVA) from small configs in hf_other, and more
speech, translation and vision models (HF_MORE, a table of configs).  Prints
PASS or FAIL per model (max error bound 1e-4 absolute plus 1e-3
relative) and `N passed, M failed`; exit 1 when any failed.
"""
import os
import sys
import time

import torch

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "torch"))
sys.path.insert(0, os.path.join(HERE, "..", "py"))

TORCHVISION = ["squeezenet1_0", "googlenet", "mobilenet_v2", "mobilenet_v3_small",
               "shufflenet_v2_x0_5", "mnasnet0_5", "efficientnet_b0", "efficientnet_v2_s",
               "densenet121", "regnet_y_400mf", "regnet_x_400mf", "resnext50_32x4d",
               "wide_resnet50_2", "convnext_tiny", "inception_v3", "vit_b_16", "maxvit_t",
               "swin_t", "swin_v2_t", "resnet18", "alexnet", "vgg11_bn", "mobilenet_v3_large",
               "shufflenet_v2_x1_0",
               # video, segmentation and optical flow (their first or last output)
               "mc3_18", "r2plus1d_18", "r3d_18", "s3d", "mvit_v2_s", "swin3d_t",
               "fcn_resnet50", "deeplabv3_mobilenet_v3_large",
               "lraspp_mobilenet_v3_large", "raft_small"]
TIMM = ["resnet50d", "efficientnet_b0", "convnext_atto", "deit_tiny_patch16_224",
        "levit_128s", "poolformer_s12", "mixer_s16_224", "regnetx_002", "mobilevit_xxs",
        "cait_xxs24_224", "coat_lite_tiny", "crossvit_tiny_240", "eva02_tiny_patch14_224",
        "beit_base_patch16_224", "xcit_nano_12_p16_224", "ghostnet_100", "efficientformer_l1",
        "fastvit_t8", "swin_tiny_patch4_window7_224", "maxvit_tiny_tf_224", "coatnet_0_rw_224",
        "nfnet_f0", "dm_nfnet_f0", "hrnet_w18_small", "dla34", "res2net50_14w_8s",
        "skresnet18", "cspresnet50", "rexnet_100", "mobilenetv4_conv_small",
        "edgenext_xx_small", "efficientvit_b0", "focalnet_tiny_srf", "gcvit_xxtiny",
        "nest_tiny", "pit_ti_224", "pvt_v2_b0", "twins_svt_small", "visformer_tiny",
        "convmixer_768_32", "davit_tiny", "hiera_tiny_224", "repvit_m0_9",
        "inception_next_tiny", "caformer_s18", "hgnet_tiny", "dpn68", "sequencer2d_s",
        "volo_d1_224", "tnt_s_patch16_224", "tresnet_m", "resnest14d", "sebotnet33ts_256",
        "halonet26t", "lambda_resnet26t", "tiny_vit_5m_224", "efficientformerv2_s0",
        "mvitv2_tiny", "deit3_small_patch16_224", "flexivit_small", "vovnet39a", "gernet_s",
        "cspdarknet53", "resmlp_12_224", "gmlp_ti16_224", "convit_tiny", "mobileone_s0",
        "lcnet_050", "mixnet_s", "fbnetv3_b", "mobilevitv2_050", "starnet_s1", "rdnet_tiny",
        "shvit_s1", "mambaout_femto", "inception_v4", "selecsls42b", "ecaresnet26t",
        "seresnext26d_32x4d", "gcresnet33ts", "regnetz_b16", "nf_resnet26", "efficientvit_m0",
        "levit_conv_128s", "xception41", "repghostnet_050", "tinynet_a", "cs3darknet_s",
        "vit_relpos_small_patch16_224", "vit_small_patch16_rope_224", "nextvit_small",
        "fasternet_t0",
        # added at stop 58 (a sweep over timm's modules not covered above)
        "cpubone_nano", "csatv2", "cspnext_tiny", "efficientvim_m1", "hardcorenas_a",
        "iformer_t", "lcnetv2_small", "lowformer_b0", "resnetv2_18", "resnetv2_50d_gn",
        "legacy_seresnet18", "swiftformer_xs", "swinv2_cr_tiny_ns_224",
        "swinv2_tiny_window8_256", "vit_tiny_r_s16_p8_224", "vitamin_small_224",
        "hieradet_small", "densenetblur121d", "legacy_xception", "inception_v3",
        "sam2_hiera_tiny", "naflexvit_base_patch16_gap"]
# (config class, model class, attention implementation[, config settings
# beyond SMALL])
HF = [("BertConfig", "BertForMaskedLM", "sdpa"), ("RobertaConfig", "RobertaForMaskedLM", "sdpa"),
      ("XLMRobertaConfig", "XLMRobertaForMaskedLM", "eager"),
      ("DistilBertConfig", "DistilBertForMaskedLM", "sdpa"),
      ("AlbertConfig", "AlbertForMaskedLM", "sdpa"),
      ("ElectraConfig", "ElectraForMaskedLM", "sdpa"), ("MPNetConfig", "MPNetForMaskedLM", "eager"),
      ("DebertaV2Config", "DebertaV2ForMaskedLM", "eager"),
      ("GPT2Config", "GPT2LMHeadModel", "sdpa"), ("GPTJConfig", "GPTJForCausalLM", "eager"),
      ("CodeGenConfig", "CodeGenForCausalLM", "eager"),
      ("GPTNeoXConfig", "GPTNeoXForCausalLM", "sdpa"), ("OPTConfig", "OPTForCausalLM", "sdpa"),
      ("BloomConfig", "BloomForCausalLM", "eager"), ("FalconConfig", "FalconForCausalLM", "eager"),
      ("PhiConfig", "PhiForCausalLM", "sdpa"), ("GemmaConfig", "GemmaForCausalLM", "sdpa"),
      ("Gemma2Config", "Gemma2ForCausalLM", "eager"), ("Qwen3Config", "Qwen3ForCausalLM", "sdpa"),
      ("MistralConfig", "MistralForCausalLM", "sdpa"),
      ("StableLmConfig", "StableLmForCausalLM", "sdpa"),
      ("Starcoder2Config", "Starcoder2ForCausalLM", "eager"),
      ("OlmoConfig", "OlmoForCausalLM", "eager"), ("MixtralConfig", "MixtralForCausalLM", "eager"),
      ("Qwen2MoeConfig", "Qwen2MoeForCausalLM", "eager"),
      ("LlamaConfig", "LlamaForCausalLM", "sdpa"), ("Qwen2Config", "Qwen2ForCausalLM", "sdpa"),
      ("Phi3Config", "Phi3ForCausalLM", "sdpa", dict(pad_token_id=0)),
      ("GraniteConfig", "GraniteForCausalLM", "sdpa"),
      ("CohereConfig", "CohereForCausalLM", "sdpa"),
      ("Gemma3TextConfig", "Gemma3ForCausalLM", "eager"),
      ("Olmo2Config", "Olmo2ForCausalLM", "sdpa"),
      ("SmolLM3Config", "SmolLM3ForCausalLM", "sdpa", dict(pad_token_id=0)),
      ("GlmConfig", "GlmForCausalLM", "sdpa", dict(pad_token_id=0)),
      ("GptOssConfig", "GptOssForCausalLM", "eager"),
      ("DeepseekV3Config", "DeepseekV3ForCausalLM", "eager",
       dict(qk_rope_head_dim=4, qk_nope_head_dim=4, v_head_dim=8, head_dim=4, kv_lora_rank=16,
            q_lora_rank=16, num_key_value_heads=4, n_routed_experts=4, num_experts_per_tok=2,
            n_group=1, topk_group=1, moe_intermediate_size=16, first_k_dense_replace=1)),
      ("Qwen3MoeConfig", "Qwen3MoeForCausalLM", "eager"),
      ("ModernBertConfig", "ModernBertForMaskedLM", "sdpa",
       dict(pad_token_id=0, global_attn_every_n_layers=2, local_attention=4)),
      ("MobileBertConfig", "MobileBertForMaskedLM", "eager",
       dict(embedding_size=32, intra_bottleneck_size=32, true_hidden_size=32)),
      ("BigBirdConfig", "BigBirdForMaskedLM", "eager"),
      ("ConvBertConfig", "ConvBertForMaskedLM", "eager"),
      ("RoFormerConfig", "RoFormerForMaskedLM", "eager"),
      ("DebertaConfig", "DebertaForMaskedLM", "eager"),
      ("SqueezeBertConfig", "SqueezeBertForMaskedLM", "eager", dict(embedding_size=32)),
      ("BioGptConfig", "BioGptForCausalLM", "sdpa"), ("XGLMConfig", "XGLMForCausalLM", "eager"),
      ("PersimmonConfig", "PersimmonForCausalLM", "eager"),
      ("MptConfig", "MptForCausalLM", "eager"), ("NemotronConfig", "NemotronForCausalLM", "sdpa"),
      ("MambaConfig", "MambaForCausalLM", "eager"),
      # added the evening of 2026-12-06
      ("NystromformerConfig", "NystromformerForMaskedLM", "eager",
       dict(num_landmarks=4, segment_means_seq_len=8)),
      ("ErnieConfig", "ErnieForMaskedLM", "eager"),
      ("EsmConfig", "EsmForMaskedLM", "eager", dict(pad_token_id=1)),
      ("LukeConfig", "LukeForMaskedLM", "eager", dict(entity_vocab_size=10, entity_emb_size=16)),
      ("MegatronBertConfig", "MegatronBertForMaskedLM", "eager"),
      ("MraConfig", "MraForMaskedLM", "eager"),
      ("RemBertConfig", "RemBertForMaskedLM", "eager",
       dict(input_embedding_size=32, output_embedding_size=32)),
      ("YosoConfig", "YosoForMaskedLM", "eager"),
      ("CTRLConfig", "CTRLLMHeadModel", "eager", dict(dff=64)),
      ("OpenAIGPTConfig", "OpenAIGPTLMHeadModel", "eager"),
      ("GPTNeoConfig", "GPTNeoForCausalLM", "eager",
       dict(attention_types=[[["global", "local"], 1]], window_size=4)),
      ("GPTBigCodeConfig", "GPTBigCodeForCausalLM", "eager"),
      ("FalconMambaConfig", "FalconMambaForCausalLM", "eager"),
      ("JambaConfig", "JambaForCausalLM", "eager",
       dict(num_experts=2, expert_layer_period=2, attn_layer_period=2, attn_layer_offset=1,
            mamba_d_state=4)),
      ("HeliumConfig", "HeliumForCausalLM", "eager"),
      ("OlmoeConfig", "OlmoeForCausalLM", "eager", dict(num_experts=4, num_experts_per_tok=2)),
      ("GraniteMoeConfig", "GraniteMoeForCausalLM", "eager",
       dict(num_local_experts=4, num_experts_per_tok=2)),
      # rotary embeddings through view_as_complex and torch.polar (fx2sg's complex parts)
      ("DeepseekV2Config", "DeepseekV2ForCausalLM", "eager",
       dict(qk_rope_head_dim=4, qk_nope_head_dim=4, v_head_dim=8, head_dim=4, kv_lora_rank=16,
            q_lora_rank=16, num_key_value_heads=4, n_routed_experts=4, num_experts_per_tok=2,
            n_group=1, topk_group=1, moe_intermediate_size=16, first_k_dense_replace=1)),
      ("Llama4TextConfig", "Llama4ForCausalLM", "eager",
       dict(num_local_experts=4, num_experts_per_tok=1, intermediate_size_mlp=64,
            interleave_moe_layer_step=2, no_rope_layers=[1, 0], attention_chunk_size=4)),
      # recurrent and linear-attention language models (RWKV and RecurrentGemma crashed
      # fx2sg before stop 57: a strided constant's bytes)
      ("RwkvConfig", "RwkvForCausalLM", "eager",
       dict(attention_hidden_size=32, context_length=16)),
      ("RecurrentGemmaConfig", "RecurrentGemmaForCausalLM", "eager",
       dict(num_key_value_heads=1, lru_width=32, attention_window_size=8,
            block_types=["recurrent", "attention"])),
      ("Qwen3NextConfig", "Qwen3NextForCausalLM", "eager",
       dict(linear_num_value_heads=4, linear_num_key_heads=2, linear_key_head_dim=8,
            linear_value_head_dim=8, num_experts=4, num_experts_per_tok=2,
            moe_intermediate_size=16, shared_expert_intermediate_size=16,
            layer_types=["linear_attention", "full_attention"])),
      ("MiniCPM3Config", "MiniCPM3ForCausalLM", "eager",
       dict(num_key_value_heads=4, qk_nope_head_dim=4, qk_rope_head_dim=4, v_head_dim=8,
            head_dim=4, kv_lora_rank=16, q_lora_rank=16))]
# the other models' small configs (hf_other, HF_MORE): a transformer's, an encoder-decoder's
_SMALL = dict(hidden_size=32, num_hidden_layers=2, num_attention_heads=4, intermediate_size=64)
_SEQ = dict(d_model=32, encoder_ffn_dim=64, decoder_ffn_dim=64, encoder_layers=2,
            decoder_layers=2, encoder_attention_heads=4, decoder_attention_heads=4)
SMALL = dict(hidden_size=32, num_hidden_layers=2, num_attention_heads=4, intermediate_size=64,
             vocab_size=100, max_position_embeddings=64, n_embd=32, n_layer=2, n_head=4,
             num_key_value_heads=2, head_dim=8, n_positions=64, rotary_dim=8,
             word_embed_proj_dim=32, ffn_dim=64)


class Output(torch.nn.Module):
    """One output of a model (out: a key of its dict or ModelOutput, or an
    index of its list) for its input, passed by keyword where names are
    given, with the keyword arguments kw."""

    def __init__(self, m, out, names=(), **kw):
        super().__init__()
        self.m, self.out, self.names, self.kw = m, out, names, kw

    def call(self, *xs):
        r = self.m(**dict(zip(self.names, xs)), **self.kw) if self.names else \
            self.m(*xs, **self.kw)
        return r[self.out]

    def forward(self, x):
        return self.call(x)


class Output2(Output):
    """Output for two inputs."""

    def forward(self, x, y):
        return self.call(x, y)


def torchvision_model(name):
    import torchvision.models as tvm
    from torchvision.models import optical_flow, segmentation, video
    if hasattr(video, name):
        # S3D's last pool and MViT's position embeddings take 16 frames of 224x224
        big = name in ("s3d", "mvit_v2_s")
        return getattr(video, name)(num_classes=10), \
            [torch.randn(1, 3, 16, 224, 224) if big else torch.randn(1, 3, 8, 64, 64)]
    if hasattr(segmentation, name):
        m = getattr(segmentation, name)(weights=None, weights_backbone=None, num_classes=10)
        return Output(m, "out"), [torch.randn(1, 3, 64, 64)]
    if hasattr(optical_flow, name):
        return Output2(getattr(optical_flow, name)(), -1, num_flow_updates=2), \
            [torch.randn(1, 3, 128, 128), torch.randn(1, 3, 128, 128)]
    kw = dict(aux_logits=False, init_weights=True) if name in ("googlenet", "inception_v3") \
        else {}
    size = 299 if name == "inception_v3" else 224 if name.startswith(("vit", "swin", "maxvit")) \
        else 64
    return getattr(tvm, name)(num_classes=10, **kw), [torch.randn(1, 3, size, size)]


def timm_model(name):
    import timm
    m = timm.create_model(name, pretrained=False, num_classes=10)
    size = (getattr(m, "pretrained_cfg", None) or {}).get("input_size", (3, 224, 224))[-1]
    return m, [torch.randn(1, 3, size, size)]


def hf_model(spec):
    import transformers
    cfg_name, cls_name, attn = spec[:3]
    cfg = getattr(transformers, cfg_name)()
    for k, v in dict(SMALL, **(spec[3] if len(spec) > 3 else {})).items():
        if hasattr(cfg, k):
            try:
                setattr(cfg, k, v)
            except AttributeError:
                pass        # a property (Falcon's head_dim)
    cfg._attn_implementation = attn
    return Output(getattr(transformers, cls_name)(cfg), "logits", ["input_ids"]), \
        [torch.randint(0, 100, (2, 8))]


def llava_model():
    """LLaVA from small configs (a CLIP vision tower of 16x16 images in 8x8
    patches, Llama's text model as SMALL): its image features go into the
    four image tokens by masked_scatter."""
    import transformers as tf
    vision = tf.CLIPVisionConfig(hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                                 num_attention_heads=4, image_size=16, patch_size=8,
                                 projection_dim=32)
    text = tf.LlamaConfig(hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                          num_attention_heads=4, num_key_value_heads=2, vocab_size=100,
                          max_position_embeddings=64, pad_token_id=0)
    cfg = tf.LlavaConfig(vision_config=vision, text_config=text, image_token_index=99,
                         image_seq_length=4)
    ids = torch.randint(1, 90, (2, 10))
    ids[:, 2:6] = 99
    return Output2(tf.LlavaForConditionalGeneration(cfg), "logits",
                   ["input_ids", "pixel_values"]), [ids, torch.randn(2, 3, 16, 16)]

def hf_other(name):
    """Hugging Face's encoder-decoders, speech, vision and multimodal
    models from small configs (HF_OTHER)."""
    import transformers as tf
    ids = torch.randint(3, 100, (2, 8))
    dec = torch.randint(3, 100, (2, 5))
    image = torch.randn(2, 3, 32, 32)
    s2s = ["input_ids", "decoder_input_ids"]      # an encoder-decoder's inputs
    if name == "T5":
        c = tf.T5Config(d_model=32, d_ff=64, num_layers=2, num_heads=4, d_kv=8, vocab_size=100,
                        decoder_start_token_id=0)
        return Output2(tf.T5ForConditionalGeneration(c), "logits", s2s), [ids, dec]
    if name == "BART":
        c = tf.BartConfig(vocab_size=100, max_position_embeddings=64, **_SEQ)
        return Output2(tf.BartForConditionalGeneration(c), "logits", s2s), [ids, dec]
    if name == "Whisper":
        c = tf.WhisperConfig(vocab_size=100, num_mel_bins=16, max_source_positions=16,
                             max_target_positions=16, pad_token_id=0, decoder_start_token_id=1,
                             bos_token_id=1, eos_token_id=2, **_SEQ)
        return Output2(tf.WhisperForConditionalGeneration(c), "logits",
                       ["input_features", "decoder_input_ids"]), \
            [torch.randn(2, 16, 32), dec]
    if name == "Wav2Vec2":
        c = tf.Wav2Vec2Config(conv_dim=(16, 16), conv_kernel=(10, 3), conv_stride=(5, 2),
                              num_conv_pos_embeddings=8, num_conv_pos_embedding_groups=4,
                              vocab_size=20, **_SMALL)
        return Output(tf.Wav2Vec2ForCTC(c), "logits"), [torch.randn(2, 400)]
    if name == "ViT":
        c = tf.ViTConfig(image_size=32, patch_size=8, num_labels=10, **_SMALL)
        return Output(tf.ViTForImageClassification(c), "logits"), [image]
    if name == "DINOv2":
        c = tf.Dinov2Config(image_size=32, patch_size=8, num_labels=10, **_SMALL)
        return Output(tf.Dinov2ForImageClassification(c), "logits"), [image]
    if name == "Swin":
        c = tf.SwinConfig(image_size=32, patch_size=4, embed_dim=16, depths=[1, 1],
                          num_heads=[2, 4], window_size=4, num_labels=10)
        return Output(tf.SwinForImageClassification(c), "logits"), [image]
    if name == "SegFormer":
        c = tf.SegformerConfig(num_encoder_blocks=2, depths=[1, 1], sr_ratios=[2, 1],
                               hidden_sizes=[16, 32], num_attention_heads=[1, 2],
                               decoder_hidden_size=32, num_labels=5, patch_sizes=[7, 3],
                               strides=[4, 2], mlp_ratios=[2, 2])
        return Output(tf.SegformerForSemanticSegmentation(c), "logits"), [image]
    if name == "ConvNeXtV2":
        c = tf.ConvNextV2Config(hidden_sizes=[16, 32], depths=[1, 1], num_stages=2,
                                num_labels=10)
        return Output(tf.ConvNextV2ForImageClassification(c), "logits"), [image]
    if name == "CLIP":
        c = tf.CLIPConfig(text_config=dict(vocab_size=100, max_position_embeddings=16, **_SMALL),
                          vision_config=dict(image_size=16, patch_size=8, **_SMALL),
                          projection_dim=16)
        return Output2(tf.CLIPModel(c), "logits_per_image"), \
            [torch.randint(0, 100, (2, 7)), torch.randn(2, 3, 16, 16)]
    if name == "DETR":
        backbone = tf.ResNetConfig(hidden_sizes=[16, 32], depths=[1, 1], embedding_size=16,
                                   out_features=["stage2"])
        c = tf.DetrConfig(use_timm_backbone=False, backbone_config=backbone,
                          use_pretrained_backbone=False, num_queries=5, num_labels=3,
                          encoder_layers=1, decoder_layers=1, **{
                              k: v for k, v in _SEQ.items() if "layers" not in k})
        return Output(tf.DetrForObjectDetection(c), "logits"), [torch.randn(1, 3, 64, 64)]
    if name == "Mamba2":
        c = tf.Mamba2Config(hidden_size=32, num_hidden_layers=2, vocab_size=100, head_dim=8,
                            num_heads=8, n_groups=1, state_size=16, expand=2, chunk_size=4)
        return Output(tf.Mamba2ForCausalLM(c), "logits"), [torch.randint(0, 100, (2, 8))]
    if name == "LLaVA":
        return llava_model()
    raise KeyError(name)


HF_OTHER = ["T5", "BART", "Whisper", "Wav2Vec2", "ViT", "DINOv2", "Swin", "SegFormer",
            "ConvNeXtV2", "CLIP", "DETR", "Mamba2", "LLaVA"]

_S2S = dict(_SEQ, vocab_size=100, max_position_embeddings=64)
_SPEECH = dict(conv_dim=(16, 16), conv_kernel=(10, 3), conv_stride=(5, 2),
               num_conv_pos_embeddings=8, num_conv_pos_embedding_groups=4, vocab_size=20,
               **_SMALL)
# name: (config class, model class, config settings, output, inputs: 'audio' (a
# waveform [2, 400]), 'image' ([2, 3, 32, 32]), 'seq2seq' (input_ids and
# decoder_input_ids), 'features' (input_features [2, 16, 16] and decoder_input_ids),
# 'spectrogram' ([2, 24, 16]), 'pair' (input_ids and pixel_values 16x16), 'text')
HF_MORE = {
    "HuBERT": ("HubertConfig", "HubertForCTC", _SPEECH, "logits", "audio"),
    "WavLM": ("WavLMConfig", "WavLMForCTC", dict(num_buckets=8, max_bucket_distance=16,
                                                 **_SPEECH), "logits", "audio"),
    "Data2VecAudio": ("Data2VecAudioConfig", "Data2VecAudioForCTC", _SPEECH, "logits", "audio"),
    "SEW": ("SEWConfig", "SEWForCTC", dict(squeeze_factor=2, **_SPEECH), "logits", "audio"),
    "UniSpeech": ("UniSpeechConfig", "UniSpeechForCTC", _SPEECH, "logits", "audio"),
    "AST": ("ASTConfig", "ASTForAudioClassification",
            dict(num_mel_bins=16, max_length=24, patch_size=8, frequency_stride=8,
                 time_stride=8, num_labels=5, **_SMALL), "logits", "spectrogram"),
    "MBart": ("MBartConfig", "MBartForConditionalGeneration", _S2S, "logits", "seq2seq"),
    "Pegasus": ("PegasusConfig", "PegasusForConditionalGeneration", _S2S, "logits", "seq2seq"),
    "Marian": ("MarianConfig", "MarianMTModel", dict(decoder_start_token_id=0, pad_token_id=0,
                                                     **_S2S), "logits", "seq2seq"),
    "M2M100": ("M2M100Config", "M2M100ForConditionalGeneration", _S2S, "logits", "seq2seq"),
    "Speech2Text": ("Speech2TextConfig", "Speech2TextForConditionalGeneration",
                    dict(_S2S, input_feat_per_channel=16, conv_channels=16,
                         max_source_positions=32, max_target_positions=32), "logits",
                    "features"),
    "BEiT": ("BeitConfig", "BeitForImageClassification",
             dict(image_size=32, patch_size=8, num_labels=10, use_relative_position_bias=True,
                  **_SMALL), "logits", "image"),
    "DeiT": ("DeiTConfig", "DeiTForImageClassification",
             dict(image_size=32, patch_size=8, num_labels=10, **_SMALL), "logits", "image"),
    "MobileViT": ("MobileViTConfig", "MobileViTForImageClassification",
                  dict(image_size=32, patch_size=2, hidden_sizes=[16, 24, 32],
                       neck_hidden_sizes=[8, 8, 16, 16, 24, 32, 64], num_labels=10), "logits",
                  "image"),
    "PVTv2": ("PvtV2Config", "PvtV2ForImageClassification",
              dict(image_size=32, hidden_sizes=[16, 32], depths=[1, 1],
                   num_attention_heads=[1, 2], sr_ratios=[2, 1], patch_sizes=[7, 3],
                   strides=[4, 2], mlp_ratios=[2, 2], num_encoder_blocks=2, num_labels=10),
              "logits", "image"),
    "ResNet": ("ResNetConfig", "ResNetForImageClassification",
               dict(hidden_sizes=[16, 32], depths=[1, 1], embedding_size=16, num_labels=10),
               "logits", "image"),
    "RegNet": ("RegNetConfig", "RegNetForImageClassification",
               dict(hidden_sizes=[16, 32], depths=[1, 1], embedding_size=16, groups_width=8,
                    num_labels=10), "logits", "image"),
    "DPT": ("DPTConfig", "DPTForDepthEstimation",
            dict(image_size=32, patch_size=8, backbone_out_indices=[0, 1],
                 neck_hidden_sizes=[16, 32], fusion_hidden_size=16, reassemble_factors=[2, 1],
                 **_SMALL), "predicted_depth", "image"),
    "LeViT": ("LevitConfig", "LevitForImageClassification",
              dict(image_size=32, hidden_sizes=[16, 32, 48], num_attention_heads=[1, 2, 3],
                   depths=[1, 1, 1], key_dim=[8, 8, 8], num_labels=10), "logits", "image"),
    "ConvNeXt": ("ConvNextConfig", "ConvNextForImageClassification",
                 dict(hidden_sizes=[16, 32], depths=[1, 1], num_stages=2, num_labels=10),
                 "logits", "image"),
    "SigLIP": ("SiglipConfig", "SiglipModel",
               dict(text_config=dict(vocab_size=100, max_position_embeddings=16, **_SMALL),
                    vision_config=dict(image_size=16, patch_size=8, **_SMALL)),
               "logits_per_image", "pair"),
    "BLIPText": ("BlipTextConfig", "BlipTextLMHeadModel", dict(vocab_size=100, **_SMALL),
                 "logits", "text"),
    # its pooler is AvgPool2d(2560, ceil_mode=True) over a 1x1 map (a 2560-row padding
    # before stop 57: sgc run ran out of memory)
    "EfficientNet": ("EfficientNetConfig", "EfficientNetForImageClassification",
                     dict(image_size=32, num_labels=10), "logits", "image"),
    # its token mixing is torch.fft.fftn(h, dim=(1, 2)).real (fx2sg's complex parts)
    "FNet": ("FNetConfig", "FNetForMaskedLM", dict(vocab_size=100, max_position_embeddings=16,
                                                   **_SMALL), "logits", "text"),
}


def hf_more(name):
    """A model of HF_MORE from its small config, with its inputs."""
    import transformers as tf
    cfg_cls, cls, kw, out, kind = HF_MORE[name]
    m = getattr(tf, cls)(getattr(tf, cfg_cls)(**kw))
    ids, dec = torch.randint(3, 100, (2, 8)), torch.randint(3, 100, (2, 5))
    if kind == "seq2seq":
        return Output2(m, out, ["input_ids", "decoder_input_ids"]), [ids, dec]
    if kind == "features":
        return Output2(m, out, ["input_features", "decoder_input_ids"]), \
            [torch.randn(2, 16, 16), dec]
    if kind == "pair":
        return Output2(m, out), [torch.randint(0, 100, (2, 7)), torch.randn(2, 3, 16, 16)]
    x = {"audio": lambda: torch.randn(2, 400), "image": lambda: torch.randn(2, 3, 32, 32),
         "spectrogram": lambda: torch.randn(2, 24, 16), "text": lambda: ids}[kind]()
    return Output(m, out), [x]

def main(argv):
    if len(argv) < 2:
        sys.exit(__doc__)
    sgc, picks = argv[1], argv[2:]
    sys.argv = [argv[0], sgc]       # _common's Suite reads sgc's path from argv
    import test_fx2sg as t
    import stio
    from _common import Suite, compare
    t.stio, t.compare = stio, compare
    fx = t.load_fx2sg()
    zoos = [z for z in picks if z in ("torchvision", "timm", "hf")] or ["torchvision", "timm",
                                                                       "hf"]
    names = [p for p in picks if p not in ("torchvision", "timm", "hf")]
    todo = [("torchvision", n, torchvision_model) for n in TORCHVISION] + \
        [("timm", n, timm_model) for n in TIMM] + \
        [("hf", s, hf_model) for s in HF] + [("hf", n, hf_other) for n in HF_OTHER] + \
        [("hf", n, hf_more) for n in HF_MORE]
    S = Suite("zoo")
    for zoo, spec, make in todo:
        label = spec[1] if isinstance(spec, tuple) else spec
        if zoo not in zoos or (names and label not in names):
            continue
        t0 = time.time()
        torch.manual_seed(0)
        try:
            m, args = make(spec)
            m = m.eval()
        except ImportError as e:
            S.report("%s %s" % (zoo, label), "not available: %s" % e)
            continue
        # eager first: a model may set itself up on its first call in eval
        # mode (RWKV rescales its weights in place, under no_grad)
        with torch.no_grad():
            ref = m(*args)
        try:
            ex = fx.export(m, args)
        except fx.Error as e:
            S.report("%s %s" % (zoo, label), "export: %s" % e)
            continue
        out, why = t.run_export(S, ex, label)
        if not why:
            why = compare(out["out"], ref, atol=1e-4, rtol=1e-3)
        S.report("%s %s (%.0f s)" % (zoo, label, time.time() - t0), why)
    S.finish()


if __name__ == "__main__":
    main(sys.argv)
