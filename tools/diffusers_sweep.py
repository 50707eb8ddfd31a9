"""diffusers' models and mobile conv nets through `og.from_torch` (or `og.from_onnx`), each built
from a small config with random weights, against PyTorch: which import, and how close they come.

The models of diffusion pipelines (`UNet2DConditionModel` in SD-1.5 and SD-XL layouts, SD-1.5's
also with its four levels; `AutoencoderKL`'s decoder; `SD3Transformer2DModel`;
`FluxTransformer2DModel` with and without guidance, its image and text ids module buffers:
constants of the compiled step, so its float64 rope folds at import) and the conv nets of mobile
vision (transformers' `MobileNetV2Model`, and torchvision's MobileNetV3 layout written out here:
hardswish, squeeze-excitation with hardsigmoid, inference batch norms with random statistics). Each runs eagerly in float32; the
rows are those of `tools/transformers_sweep.py` (the same import, runs and NMSE).

    python tools/diffusers_sweep.py                 # every model, a markdown table
    python tools/diffusers_sweep.py unet flux       # some of them
    python tools/diffusers_sweep.py --onnx          # through torch.onnx.export, og.from_onnx
    python tools/diffusers_sweep.py --markdown FILE # also write the table there
"""

from __future__ import annotations

import argparse
import sys
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from tools.transformers_sweep import row


def _unet(**extra: Any) -> Any:
    import diffusers

    config: dict[str, Any] = {
        "sample_size": 8,
        "in_channels": 4,
        "out_channels": 4,
        "layers_per_block": 1,
        "block_out_channels": (32, 64),
        "down_block_types": ("CrossAttnDownBlock2D", "DownBlock2D"),
        "up_block_types": ("UpBlock2D", "CrossAttnUpBlock2D"),
        "cross_attention_dim": 32,
        "attention_head_dim": 8,
        "norm_num_groups": 8,
    }
    return diffusers.UNet2DConditionModel(**{**config, **extra})


def flux_model(guidance: bool) -> Any:
    import diffusers

    return diffusers.FluxTransformer2DModel(
        patch_size=1,
        in_channels=16,
        num_layers=1,
        num_single_layers=1,
        attention_head_dim=8,
        num_attention_heads=2,
        joint_attention_dim=32,
        pooled_projection_dim=16,
        axes_dims_rope=(2, 2, 4),
        guidance_embeds=guidance,
    )


def models() -> dict[str, tuple[Callable[[], Any], Callable[[], tuple[Any, ...]]]]:
    """Name -> (a module returning one tensor, its example arguments); diffusers and
    transformers imported on first use."""
    import diffusers
    import torch
    import transformers
    from torch import nn

    def text() -> Any:
        return torch.randn(1, 5, 32)

    class Unet(nn.Module):
        def __init__(self, sdxl: bool, levels: int = 2) -> None:
            super().__init__()
            extra: dict[str, Any] = {}
            if levels == 4:  # SD-1.5's layout: three cross-attention levels, two layers a block
                extra = {
                    "sample_size": 16,
                    "layers_per_block": 2,
                    "block_out_channels": (32, 64, 64, 64),
                    "down_block_types": ("CrossAttnDownBlock2D",) * 3 + ("DownBlock2D",),
                    "up_block_types": ("UpBlock2D",) + ("CrossAttnUpBlock2D",) * 3,
                }
            if sdxl:  # pooled text and size/crop ids embedded with the time, linear projections
                extra = {
                    "addition_embed_type": "text_time",
                    "addition_time_embed_dim": 8,
                    "projection_class_embeddings_input_dim": 16 + 6 * 8,
                    "transformer_layers_per_block": (1, 2),
                    "use_linear_projection": True,
                    "down_block_types": ("DownBlock2D", "CrossAttnDownBlock2D"),
                    "up_block_types": ("CrossAttnUpBlock2D", "UpBlock2D"),
                }
            self.unet = _unet(**extra)
            self.sdxl = sdxl

        def forward(self, x: Any, t: Any, text: Any, *added: Any) -> Any:
            cond = {"text_embeds": added[0], "time_ids": added[1]} if self.sdxl else None
            return self.unet(
                x, t, encoder_hidden_states=text, added_cond_kwargs=cond, return_dict=False
            )[0]

    class VaeDecoder(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.vae = diffusers.AutoencoderKL(
                in_channels=3,
                out_channels=3,
                down_block_types=("DownEncoderBlock2D",) * 2,
                up_block_types=("UpDecoderBlock2D",) * 2,
                block_out_channels=(32, 64),
                layers_per_block=1,
                latent_channels=4,
                norm_num_groups=8,
                sample_size=16,
            )

        def forward(self, z: Any) -> Any:
            return self.vae.decode(z, return_dict=False)[0]

    class Sd3(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.transformer = diffusers.SD3Transformer2DModel(
                sample_size=8,
                patch_size=2,
                in_channels=4,
                num_layers=2,
                attention_head_dim=8,
                num_attention_heads=4,
                joint_attention_dim=32,
                caption_projection_dim=32,
                pooled_projection_dim=16,
                out_channels=4,
                pos_embed_max_size=16,
            )

        def forward(self, x: Any, text: Any, pooled: Any, t: Any) -> Any:
            return self.transformer(
                hidden_states=x,
                encoder_hidden_states=text,
                pooled_projections=pooled,
                timestep=t,
                return_dict=False,
            )[0]

    class Flux(nn.Module):
        """One image size's step: the ids are buffers (image ids (0, row, column), text ids 0)."""

        def __init__(self, guidance: bool) -> None:
            super().__init__()
            self.transformer = flux_model(guidance)
            image = torch.zeros(16, 3)
            image[:, 1] = torch.arange(16) // 4
            image[:, 2] = torch.arange(16) % 4
            self.register_buffer("image_ids", image)
            self.register_buffer("text_ids", torch.zeros(5, 3))

        def forward(self, x: Any, text: Any, pooled: Any, t: Any, *guidance: Any) -> Any:
            return self.transformer(
                hidden_states=x,
                encoder_hidden_states=text,
                pooled_projections=pooled,
                timestep=t,
                img_ids=self.image_ids,
                txt_ids=self.text_ids,
                guidance=guidance[0] if guidance else None,
                return_dict=False,
            )[0]

    class MobileNetV2(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            config = transformers.MobileNetV2Config(
                image_size=32, depth_multiplier=0.25, num_labels=10
            )
            self.model = transformers.MobileNetV2ForImageClassification(config)

        def forward(self, image: Any) -> Any:
            return self.model(image).logits

    def transformer_args(shape: tuple[int, ...], *extra: Any) -> tuple[Any, ...]:
        return torch.randn(1, *shape), text(), torch.randn(1, 16), torch.tensor([3.0]), *extra

    image = (lambda: (torch.randn(1, 3, 32, 32),))  # fmt: skip
    return {
        "unet": (
            lambda: Unet(sdxl=False),
            lambda: (torch.randn(1, 4, 8, 8), torch.tensor([10]), text()),
        ),
        "unet_sd15_layout": (
            lambda: Unet(sdxl=False, levels=4),
            lambda: (torch.randn(1, 4, 16, 16), torch.tensor([10]), text()),
        ),
        "unet_sdxl": (
            lambda: Unet(sdxl=True),
            lambda: (
                torch.randn(1, 4, 8, 8),
                torch.tensor([10]),
                text(),
                torch.randn(1, 16),
                torch.tensor([[32.0, 32.0, 0.0, 0.0, 32.0, 32.0]]),
            ),
        ),
        "vae_decoder": (VaeDecoder, lambda: (torch.randn(1, 4, 8, 8),)),
        "sd3": (Sd3, lambda: transformer_args((4, 8, 8))),
        "flux": (lambda: Flux(guidance=False), lambda: transformer_args((16, 16))),
        "flux_guidance": (
            lambda: Flux(guidance=True),
            lambda: transformer_args((16, 16), torch.tensor([3.5])),
        ),
        "mobilenet_v2": (MobileNetV2, image),
        "mobilenet_v3": (mobilenet_v3, image),
    }


def mobilenet_v3() -> Any:
    """torchvision's `mobilenet_v3_small` layout, narrower (inverted residuals with depthwise
    convolutions, squeeze-excitation scaled by hardsigmoid, ReLU and hardswish), for 10 classes:
    torchvision itself is not installed beside the CPU build of torch."""
    import torch
    from torch import nn

    def conv(cin: int, cout: int, k: int, stride: int, act: Any, groups: int = 1) -> Any:
        layers = [
            nn.Conv2d(cin, cout, k, stride, (k - 1) // 2, groups=groups, bias=False),
            nn.BatchNorm2d(cout, eps=0.001, momentum=0.01),
        ]
        return nn.Sequential(*layers, *([act()] if act else []))

    class SqueezeExcitation(nn.Module):
        def __init__(self, channels: int, squeeze: int) -> None:
            super().__init__()
            self.avgpool = nn.AdaptiveAvgPool2d(1)
            self.fc1 = nn.Conv2d(channels, squeeze, 1)
            self.fc2 = nn.Conv2d(squeeze, channels, 1)

        def forward(self, x: Any) -> Any:
            scale = self.fc2(torch.relu(self.fc1(self.avgpool(x))))
            return torch.nn.functional.hardsigmoid(scale) * x

    class InvertedResidual(nn.Module):
        def __init__(
            self, cin: int, k: int, expand: int, cout: int, se: bool, hs: bool, stride: int
        ) -> None:
            super().__init__()
            act = nn.Hardswish if hs else nn.ReLU
            layers: list[Any] = []
            if expand != cin:
                layers.append(conv(cin, expand, 1, 1, act))
            layers.append(conv(expand, expand, k, stride, act, groups=expand))
            if se:
                layers.append(SqueezeExcitation(expand, max(8, (expand // 4 + 4) // 8 * 8)))
            layers.append(conv(expand, cout, 1, 1, None))
            self.block = nn.Sequential(*layers)
            self.residual = stride == 1 and cin == cout

        def forward(self, x: Any) -> Any:
            y = self.block(x)
            return x + y if self.residual else y

    class MobileNetV3(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            blocks = [  # in, kernel, expanded, out, SE, hardswish, stride
                (16, 3, 16, 16, True, False, 2),
                (16, 3, 48, 24, False, False, 2),
                (24, 3, 56, 24, False, False, 1),
                (24, 5, 64, 40, True, True, 2),
                (40, 5, 96, 40, True, True, 1),
            ]
            self.features = nn.Sequential(
                conv(3, 16, 3, 2, nn.Hardswish),
                *(InvertedResidual(*b) for b in blocks),
                conv(40, 96, 1, 1, nn.Hardswish),
            )
            self.avgpool = nn.AdaptiveAvgPool2d(1)
            self.classifier = nn.Sequential(
                nn.Linear(96, 64), nn.Hardswish(), nn.Dropout(0.2), nn.Linear(64, 10)
            )

        def forward(self, x: Any) -> Any:
            return self.classifier(torch.flatten(self.avgpool(self.features(x)), 1))

    return MobileNetV3()


def random_batch_norms(module: Any) -> Any:
    """`module` with each batch norm's running statistics and affine made random (a fresh norm
    is the identity in eval mode, which would hide a wrong import of it)."""
    import torch

    for norm in module.modules():
        if isinstance(norm, torch.nn.modules.batchnorm._BatchNorm):
            with torch.no_grad():
                norm.running_mean.normal_(0.0, 0.5)
                norm.running_var.uniform_(0.5, 2.0)
                norm.weight.normal_(1.0, 0.2)
                norm.bias.normal_(0.0, 0.2)
    return module


def check(name: str, onnx: bool = False) -> str:
    """The table row of one model, built with seeded random weights."""
    import torch

    make, example = models()[name]
    torch.manual_seed(0)
    module = random_batch_norms(make()).eval()
    return row(name, module, example(), False, onnx)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("only", nargs="*", help="models by name (default: all)")
    parser.add_argument("--markdown", metavar="FILE", help="also write the table there")
    parser.add_argument(
        "--onnx", action="store_true", help="through torch.onnx.export and og.from_onnx instead"
    )
    args = parser.parse_args(argv)
    warnings.filterwarnings("ignore")
    import diffusers
    import transformers

    diffusers.utils.logging.set_verbosity_error()
    transformers.logging.set_verbosity_error()
    table = models()
    names = args.only or list(table)
    unknown = sorted(set(names) - set(table))
    if unknown:
        parser.error(f"unknown model {unknown[0]!r}; known: {', '.join(table)}")
    lines = [
        f"diffusers {diffusers.__version__}, transformers {transformers.__version__}; float32; "
        + ("torch.onnx.export, og.from_onnx" if args.onnx else "torch.export, og.from_torch"),
        "",
        "| model | import | graph / refusal | NMSE reference | NMSE compiled (CPU) |",
        "|---|---|---|---|---|",
    ]
    print("\n".join(lines), flush=True)
    for name in names:
        lines.append(check(name, args.onnx))
        print(lines[-1], flush=True)
    if args.markdown:
        Path(args.markdown).write_text("\n".join(lines) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
